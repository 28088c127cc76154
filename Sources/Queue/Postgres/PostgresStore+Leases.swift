extension PostgresStore: LeaseReclaiming {
    public func leaseHolders(prefix: String) throws(StoreError) -> [String] {
        try read { db in
            // left(), not LIKE: a host name may hold LIKE's wildcards (`_`).
            try db.rows(
                """
                SELECT DISTINCT attempted_by FROM jobs
                WHERE state = 'running' AND left(attempted_by, length($1::text)) = $1::text
                """, [.text(prefix)]
            ) { $0.text(0) }
        }
    }

    public func reclaimLeases(of worker: String, now: Int64) throws(StoreError) -> Int {
        let count = try writeStatement { db in
            try db.run(
                """
                UPDATE jobs SET state = 'retryable', scheduled_at = $1::bigint, last_error = 'lease holder gone',
                                attempted_by = NULL, lease_expires_at = NULL
                WHERE state = 'running' AND attempted_by = $2::text
                """, [.integer(now), .text(worker)])
        }
        if count > 0 { signalChange() }
        return count
    }
}
