import Common

/// The job statements both stores run as written (`SharedQueries`).
extension SharedQueries {
    public func ping() throws(StoreError) {
        _ = try read { db in try db.query("SELECT count(*) FROM schema_migrations", []) { $0.int(0) } }
    }

    /// Counts by full scans, on a connection of their own (`withStatsConnection`).
    public func stats() throws(StoreError) -> QueueStats {
        try withStatsConnection { db in
            try QueueStats.counted { sql in try db.query(sql, []) { (key: $0.text(0), number: $0.optionalInt64(1)) } }
        }
    }

    public func hasDueJobs(now: Int64) throws(StoreError) -> Bool {
        try read { db in
            try db.query(
                "SELECT EXISTS (SELECT 1 FROM jobs WHERE state IN ('available', 'retryable') AND scheduled_at <= $1::bigint)",
                [.integer(now)]
            ) { $0.bool(0) }.first ?? false
        }
    }

    /// The sum of each device's live-job count (migrations 7 and 11), which DEVICE_QUEUE_MAX trusts: every ingest
    /// process asks once a second (QUEUE_MAX), and counting the jobs themselves scanned the whole table (a million
    /// rows deep in a backlog; 182 ms of a PostgreSQL core per call against 0.26 ms, `bench/pg_live_count.py`).
    public func liveJobCount() throws(StoreError) -> Int {
        try read { db in try db.query("SELECT coalesce(sum(live_jobs), 0) FROM devices", []) { $0.int(0) }.first ?? 0 }
    }

    public func makeRetryableDue(now: Int64) throws(StoreError) -> Int {
        let count = try writeStatement { db in
            try db.change(
                "\(Self.batchUpdate) jobs SET scheduled_at = $1::bigint WHERE state = 'retryable' AND scheduled_at > $1::bigint",
                [.integer(now)])
        }
        if count > 0 { jobsBecameDue() }
        return count
    }

    public func leaseHolders() throws(StoreError) -> [String] {
        // Through jobs_leased: only the running jobs, at most the deliverers' pushes in flight.
        try read { db in
            try db.query("SELECT DISTINCT attempted_by FROM jobs WHERE state = 'running' AND lease_expires_at IS NOT NULL", []) { $0.text(0) }
        }
    }

    /// One statement: a head going back to retryable changes no device's head or live count, so no device lock. The
    /// caller, a starting deliverer, claims them itself: no one else needs waking.
    public func takeBackLeases(of worker: String, now: Int64) throws(StoreError) -> Int {
        try writeStatement { db in
            try db.change(
                """
                \(Self.batchUpdate) jobs SET state = 'retryable', scheduled_at = $1::bigint, last_error = 'worker gone',
                                attempted_by = NULL, lease_expires_at = NULL
                WHERE \(LeaseGuard.condition(worker: "$2::text", attempt: nil))
                """, [.integer(now), .text(worker)])
        }
    }

    public func reportedOutcome(publicID: String) throws(StoreError) -> ReportedOutcome? {
        try read { db in
            try db.query("SELECT outcome, reason FROM job_outcomes WHERE public_id = $1::text", [.text(publicID)]) {
                ReportedOutcome(kind: ReportedOutcome.Kind(rawValue: $0.text(0)) ?? .rejected, reason: $0.text(1))
            }.first
        }
    }

    public func purgeReportedOutcomes(before: Int64) throws(StoreError) -> Int {
        try writeStatement { db in try db.change("DELETE FROM job_outcomes WHERE finished_at < $1::bigint", [.integer(before)]) }
    }

    public func recordPause(worker: String, reason: String?, now: Int64) throws(StoreError) {
        _ = try writeStatement { db in
            if let reason {
                try db.change(
                    """
                    INSERT INTO delivery_pauses (worker, reason, updated_at) VALUES ($1::text, $2::text, $3::bigint)
                    ON CONFLICT (worker) DO UPDATE SET reason = excluded.reason, updated_at = excluded.updated_at
                    """, [.text(worker), .text(reason), .integer(now)])
            } else {
                try db.change("DELETE FROM delivery_pauses WHERE worker = $1::text", [.text(worker)])
            }
        }
    }

    public func currentPause(since: Int64) throws(StoreError) -> String? {
        try read { db in
            try db.query(
                "SELECT reason FROM delivery_pauses WHERE updated_at >= $1::bigint ORDER BY updated_at DESC LIMIT 1", [.integer(since)]
            ) { $0.text(0) }.first
        }
    }
}
