/// The lease guard, the one condition every store statement that acts on a claimed job carries: the job is still
/// running, leased by this worker, at the attempt the worker was given. The attempt is the fencing counter: a lease
/// that expired and was claimed again (by anyone) has a higher attempt, so the late word of the first holder changes
/// nothing. Written once here so the SQLite and PostgreSQL stores, and each statement in them, cannot drift apart.
/// `finish` carries it in its read of the jobs the worker holds, without the attempt, which `FinishPlan` compares;
/// its writes then go by id, in the same transaction (SQLite's single writer; PostgreSQL's rows locked by the read).
enum LeaseGuard {
    /// The SQL condition, given SQL expressions (placeholders or columns) for the worker and the attempt. `attempt`
    /// is nil only for a release, which hands back jobs the worker holds now and never sent. `table` qualifies the
    /// columns in a statement that joins `jobs` with something else.
    static func condition(worker: String, attempt: String?, table: String? = nil) -> String {
        let column = table.map { "\($0)." } ?? ""
        let held = "\(column)state = 'running' AND \(column)attempted_by = \(worker)"
        return attempt.map { "\(held) AND \(column)attempt = \($0)" } ?? held
    }
}
