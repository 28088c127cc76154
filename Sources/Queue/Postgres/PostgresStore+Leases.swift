import Common

extension PostgresStore {
    public func leaseHolders() throws(StoreError) -> [String] {
        // Through jobs_leased: only the running jobs, at most the deliverers' pushes in flight.
        try read { db in
            try db.rows("SELECT DISTINCT attempted_by FROM jobs WHERE state = 'running' AND lease_expires_at IS NOT NULL", []) {
                $0.text(0)
            }
        }
    }

    public func takeBackLeases(of worker: String, now: Int64) throws(StoreError) -> Int {
        // One statement: a head going back to retryable changes no device's head or live count, so no device lock.
        try writeStatement { db in
            try db.run(
                """
                UPDATE jobs SET state = 'retryable', scheduled_at = $1::bigint, last_error = 'worker gone',
                                attempted_by = NULL, lease_expires_at = NULL
                WHERE \(LeaseGuard.condition(worker: "$2::text", attempt: nil))
                """, [.integer(now), .text(worker)])
        }
    }
}
