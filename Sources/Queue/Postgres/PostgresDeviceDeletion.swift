import Common
import PostgresDriver

/// `DeviceDeletion`'s steps on PostgreSQL, inside the caller's transaction.
struct PostgresDeviceDeletion: DeviceDeletionDialect {
    let db: PGConnection
    /// Inside `finish`, whose read already locked the device and found it (a job it holds names it): nothing needs
    /// an answer before the commit, so every step is sent with it and a batch stays two round trips.
    var withTheCommit = false

    /// The device first, as enqueue, finish and replay lock it: no deadlock with a deliverer recording its Test job's
    /// answer, and no job enqueued between the outcomes and the delete.
    func lockDevice(_ device: String) throws -> Bool {
        if withTheCommit { return true }
        return try !db.rows("SELECT 1 FROM devices WHERE id = $1::text FOR UPDATE", [.text(device)]) { _ in true }.isEmpty
    }

    /// Through `jobs_waiting_tests`, sent with the transaction's next round trip. One already recorded (the head APNs
    /// just answered) keeps its own.
    func reportWaitingTests(of device: String, _ outcome: ReportedOutcome, at: Int64) {
        db.runDeferred(
            """
            INSERT INTO job_outcomes (public_id, outcome, reason, finished_at)
            SELECT public_id, $2::text, $3::text, $4::bigint FROM jobs
            WHERE device_id = $1::text AND reports_outcome AND state <> 'discarded'
            ON CONFLICT (public_id) DO NOTHING
            """, [.text(device), .text(outcome.kind.rawValue), .text(outcome.reason), .integer(at)])
    }

    func recordTombstone(of device: String, reason: String, at: Int64) {
        db.runDeferred(
            """
            INSERT INTO tombstones (device_id, reason, removed_at) VALUES ($1::text, $2::text, $3::bigint)
            ON CONFLICT (device_id) DO UPDATE SET reason = excluded.reason, removed_at = excluded.removed_at
            """, [.text(device), .text(reason), .integer(at)])
    }

    /// The foreign keys cascade: the device's jobs, live and dead, and its monitor states go with it.
    func deleteDeviceAndJobs(_ device: String) throws -> Bool {
        let delete = "DELETE FROM devices WHERE id = $1::text"
        guard !withTheCommit else {
            db.runDeferred(delete, [.text(device)])
            return true
        }
        return try db.run(delete, [.text(device)]) > 0
    }
}
