extension SQLiteStore: LeaseReclaiming {
    public func leaseHolders(prefix: String) throws(StoreError) -> [String] {
        try read { db in
            // substr, not LIKE: a host name may hold LIKE's wildcards (`_`).
            try db.statement(
                """
                SELECT DISTINCT attempted_by FROM jobs
                WHERE state = 'running' AND substr(attempted_by, 1, length(?1)) = ?1
                """
            ).rows([.text(prefix)]) { $0.text(0) }
        }
    }

    public func reclaimLeases(of worker: String, now: Int64) throws(StoreError) -> Int {
        try write { db in
            try db.statement(
                """
                UPDATE jobs SET state = 'retryable', scheduled_at = ?1, last_error = 'lease holder gone',
                                attempted_by = NULL, lease_expires_at = NULL
                WHERE state = 'running' AND attempted_by = ?2
                """
            ).run([.integer(now), .text(worker)])
        }
    }
}
