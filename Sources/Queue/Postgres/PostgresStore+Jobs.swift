import Common
import PostgresDriver

/// Which job is a device's head changes in three places: a job is added (enqueue, replay), the head leaves
/// (delivered, dead-lettered) and the next pending job is promoted. Under READ COMMITTED two transactions doing
/// that for one device could each miss the other's uncommitted rows (two heads, or a pending job with no head left
/// to promote it), so each of them first locks the device rows it touches, in id order (no deadlock between them).
/// Claims, retries, releases and rescues change a head's state but never which job is head: they need no lock.
extension PostgresStore {
    /// How a statement both stores share begins when it changes a batch of jobs (`SharedQueries.batchUpdate`).
    static let batchUpdate = "UPDATE"

    /// Promotes a device's oldest pending job to head after its head left (completed, dead-lettered).
    static let promoteNext = """
        UPDATE jobs SET state = 'available'
        WHERE id = (SELECT id FROM jobs WHERE device_id = $1::text AND state = 'pending' ORDER BY id LIMIT 1)
        """

    /// Promotes the oldest pending job of each device in `$1` (text[]): each device's (device_id, id) index walked
    /// from its start, stopping at the first pending job. Run under `promotionPlannerSettings` (`promotion(of:)`).
    static let promoteNextOfDevices = """
        UPDATE jobs SET state = 'available' WHERE id IN (
            SELECT next.id FROM unnest($1::text[]) AS d (id)
            CROSS JOIN LATERAL (SELECT id FROM jobs WHERE device_id = d.id AND state = 'pending' ORDER BY id LIMIT 1) AS next)
        """

    /// Planner settings `promoteNextOfDevices` runs under: `SET LOCAL`, then `TO DEFAULT` after it, which is the
    /// connection's RESET value (the server's, role's or database's setting: `PGConnection` sets neither for the
    /// session). The index walk is its one sensible plan, whatever the number of devices or jobs, but PostgreSQL
    /// left to choose:
    /// - planned it again on every call at a few devices per batch, 639 ms of planning for 169 ms of execution over
    ///   10,000 pushes (pg_stat_statements): hence its generic plan, made once;
    /// - chose, while `jobs` had no statistics (a new database, until autovacuum's first ANALYZE of it), a bitmap
    ///   scan that reads every job of each device and sorts them to keep the first: 45–90 against 18–33 ms per
    ///   1,000 devices with 50 jobs queued each (EXPLAIN ANALYZE, docs/performance.md). Without bitmap scans the
    ///   walk is all that is left. (With statistics, even from a nearly empty queue, it picks the walk itself.)
    static let promotionPlannerSettings = [("plan_cache_mode", "force_generic_plan"), ("enable_bitmapscan", "off")]

    /// The statements, in order, that promote the next job of each of `devices` (several): the planner settings, the
    /// promotion, the settings back. `finish` sends them as they are; `PostgresPlanTests` plans the promotion after
    /// the statements before it.
    static func promotion(of devices: some Collection<String>) -> [(sql: String, values: [PGValue])] {
        promotionPlannerSettings.map { ("SET LOCAL \($0) = \($1)", []) } + [(promoteNextOfDevices, [.texts(devices)])]
            + promotionPlannerSettings.map { ("SET LOCAL \($0.0) TO DEFAULT", []) }
    }

    public func claim(worker: String, limit: Int, now: Int64, lease: Duration) throws(StoreError) -> [ClaimedJob] {
        guard limit > 0 else { return [] }
        // One statement: lock due heads no other claimer holds (SKIP LOCKED: claimers never wait for each other),
        // lease them, and return them with their device's token.
        let claimed = try writeStatement { db in
            try db.rows(
                """
                WITH due AS (
                    SELECT id FROM jobs WHERE state IN ('available', 'retryable') AND scheduled_at <= $1::bigint
                    ORDER BY scheduled_at LIMIT $4::bigint
                    FOR UPDATE SKIP LOCKED
                )
                UPDATE jobs SET state = 'running', attempt = jobs.attempt + 1, attempted_at = $1::bigint,
                                attempted_by = $2::text, lease_expires_at = $3::bigint
                FROM due, devices d
                WHERE jobs.id = due.id AND d.id = jobs.device_id
                RETURNING jobs.id, jobs.public_id, jobs.device_id, jobs.payload, jobs.attempt, jobs.created_at,
                          jobs.expires_at, jobs.reports_outcome, d.device_token, d.down_notification_level,
                          jobs.folded, jobs.badge, d.apns_environment, \(DeviceBurst.recentPushes(now: "$1::bigint")),
                          d.last_successful_notification
                """, [.integer(now), .text(worker), .integer(now + lease.wholeMilliseconds), .integer(Int64(limit))]
            ) { row in
                ClaimedJob(
                    id: row.int64(0), publicID: row.text(1), deviceID: row.text(2), deviceToken: row.text(8),
                    downNotificationLevel: Device.DownNotificationLevel(rawValue: row.text(9)) ?? .normal,
                    payload: row.bytes(3), attempt: row.int(4), createdAt: row.int64(5), expiresAt: row.int64(6),
                    reportsOutcome: row.bool(7), folded: row.isNull(10) ? FoldedAlerts() : FoldedAlerts(encoded: row.bytes(10)),
                    badge: row.isNull(11) ? nil : row.int(11),
                    environment: row.optionalText(12).flatMap(Settings.APNsEnvironment.init(rawValue:)),
                    recentPushes: row.int(13), lastPushAt: row.isNull(14) ? nil : row.int64(14),
                    leaseExpiresAt: now + lease.wholeMilliseconds)
            }
        }
        // Acceptance order, which is what callers log and send in.
        return claimed.sorted { $0.id < $1.id }
    }

    public func pendingJobs(deviceID: String, limit: Int) throws(StoreError) -> [PendingJob] {
        try read { db in
            try db.rows(
                """
                SELECT id, payload, created_at, reports_outcome, folded, badge, expires_at FROM jobs
                WHERE device_id = $1::text AND state = 'pending' ORDER BY id LIMIT $2::bigint
                """, [.text(deviceID), .integer(Int64(limit))]
            ) {
                PendingJob(
                    id: $0.int64(0), payload: $0.bytes(1), createdAt: $0.int64(2), reportsOutcome: $0.bool(3),
                    folded: $0.isNull(4) ? FoldedAlerts() : FoldedAlerts(encoded: $0.bytes(4)),
                    badge: $0.isNull(5) ? nil : $0.int(5), expiresAt: $0.int64(6))
            }
        }
    }

    public func reportedOutcomes(publicIDs: [String]) throws(StoreError) -> [String: ReportedOutcome] {
        guard !publicIDs.isEmpty else { return [:] }
        let rows = try read { db in
            try db.rows("SELECT public_id, outcome, reason FROM job_outcomes WHERE public_id = ANY($1::text[])", [.texts(publicIDs)]) {
                ($0.text(0), ReportedOutcome(kind: ReportedOutcome.Kind(rawValue: $0.text(1)) ?? .rejected, reason: $0.text(2)))
            }
        }
        return Dictionary(rows, uniquingKeysWith: { first, _ in first })
    }

    public func release(jobIDs: [Int64], worker: String, now: Int64) throws(StoreError) -> Int {
        guard !jobIDs.isEmpty else { return 0 }
        let count = try writeStatement { db in
            try db.run(
                """
                UPDATE jobs SET state = 'available', attempt = greatest(attempt - 1, 0), scheduled_at = $1::bigint,
                                attempted_by = NULL, lease_expires_at = NULL
                WHERE id = ANY($2::bigint[]) AND \(LeaseGuard.condition(worker: "$3::text", attempt: nil))
                """, [.integer(now), .integerArray(jobIDs), .text(worker)])
        }
        if count > 0 { signalChange() }
        return count
    }

    /// Skips the rows another transaction holds (a frozen deliverer mid-`finish`): they are rescued on a later
    /// pass, once that session is ended (`idle_in_transaction_session_timeout`), instead of every deliverer's
    /// housekeeping waiting out the lock timeout on them.
    public func rescueExpiredLeases(now: Int64) throws(StoreError) -> Int {
        let count = try writeStatement { db in
            try db.run(
                """
                UPDATE jobs SET state = 'retryable', scheduled_at = $1::bigint, last_error = 'lease expired',
                                attempted_by = NULL, lease_expires_at = NULL
                WHERE id IN (SELECT id FROM jobs WHERE state = 'running' AND lease_expires_at <= $1::bigint
                             FOR UPDATE SKIP LOCKED)
                """, [.integer(now)])
        }
        if count > 0 { signalChange() }
        return count
    }

    public func makeNextRetryDue(now: Int64) throws(StoreError) -> Bool {
        let count = try writeStatement { db in
            // SKIP LOCKED: a job another deliverer is finishing or claiming right now is not this probe's to move.
            try db.run(
                """
                UPDATE jobs SET scheduled_at = $1::bigint
                WHERE id = (SELECT id FROM jobs WHERE state IN ('available', 'retryable') AND state = 'retryable'
                            AND scheduled_at > $1::bigint ORDER BY scheduled_at LIMIT 1 FOR UPDATE SKIP LOCKED)
                """, [.integer(now)])
        }
        if count > 0 { signalChange() }
        return count > 0
    }
}
