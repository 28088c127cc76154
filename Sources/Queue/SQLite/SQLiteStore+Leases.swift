import Common

extension SQLiteStore {
    public func leaseHolders() throws(StoreError) -> [String] {
        // Through jobs_leased: only the running jobs, at most the deliverers' pushes in flight.
        try read { db in
            try db.statement("SELECT DISTINCT attempted_by FROM jobs WHERE state = 'running' AND lease_expires_at IS NOT NULL")
                .rows { $0.text(0) }
        }
    }

    public func takeBackLeases(of worker: String, now: Int64) throws(StoreError) -> Int {
        try write { db in
            try db.statement(
                """
                UPDATE jobs SET state = 'retryable', scheduled_at = ?1, last_error = 'worker gone',
                                attempted_by = NULL, lease_expires_at = NULL
                WHERE \(LeaseGuard.condition(worker: "?2", attempt: nil))
                """
            ).run([.integer(now), .text(worker)])
        }
    }
}
