import Common

/// Which job is a device's head changes in three places: a job is added (enqueue, replay), the head leaves
/// (delivered, dead-lettered) and the next pending job is promoted. Under READ COMMITTED two transactions doing
/// that for one device could each miss the other's uncommitted rows (two heads, or a pending job with no head left
/// to promote it), so each of them first locks the device rows it touches, in id order (no deadlock between them).
/// Claims, retries, releases and rescues change a head's state but never which job is head: they need no lock.
extension PostgresStore {
    /// Promotes a device's oldest pending job to head after its head left (completed, dead-lettered).
    private static let promoteNext = """
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

    /// Every completion's condition: this job ($1), still leased by this worker ($2) at this attempt ($3).
    private static let leaseGuard = "id = $1::bigint AND \(LeaseGuard.condition(worker: "$2::text", attempt: "$3::integer"))"
    /// Gives a leased job back unsent, due at $4, its attempt not counted (`leaseGuard`'s $1–$3).
    private static let giveBack = """
        UPDATE jobs SET state = 'available', scheduled_at = $4::bigint, attempt = greatest(attempt - 1, 0),
                        attempted_by = NULL, lease_expires_at = NULL
        WHERE \(leaseGuard)
        """

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

    public func finish(_ outcomes: [JobOutcome], worker: String, now: Int64) throws(StoreError) -> [Bool] {
        guard !outcomes.isEmpty else { return [] }
        let applied = try write { db in
            // A job's device never changes, so the claim's answer names the devices to lock (no read of the jobs).
            Self.lockDevices(Set(outcomes.map(\.deviceID)), db)
            // Deliveries, most of every batch, in a few set-wise statements: a round trip per job would cost more
            // than the jobs. The other outcomes, rare, one by one below.
            var applied = [Bool](repeating: false, count: outcomes.count)
            let deliveredDevices = try Self.finishDeliveries(outcomes, worker: worker, now: now, applied: &applied, db)
            for (index, outcome) in outcomes.enumerated() {
                let guardValues: [PGValue] = [.integer(outcome.jobID), .text(worker), .integer(Int64(outcome.attempt))]
                switch outcome.kind {
                case .delivered:
                    continue
                case .retry(let at, let error):
                    let changed = try db.run(
                        """
                        UPDATE jobs SET state = 'retryable', scheduled_at = $4::bigint, last_error = $5::text,
                                        attempted_by = NULL, lease_expires_at = NULL
                        WHERE \(Self.leaseGuard)
                        """, guardValues + [.integer(at), .text(error)])
                    applied[index] = changed == 1
                case .deadLetter(let reason), .abandon(let reason):
                    let finished = try db.rows(
                        """
                        UPDATE jobs SET state = 'discarded', finalized_at = $4::bigint, last_error = $5::text,
                                        attempted_by = NULL, lease_expires_at = NULL
                        WHERE \(Self.leaseGuard)
                        RETURNING device_id, public_id, reports_outcome
                        """, guardValues + [.integer(now), .text(reason)]
                    ) { ($0.text(0), $0.text(1), $0.bool(2)) }
                    let kind: ReportedOutcome.Kind = if case .abandon = outcome.kind { .failed } else { .rejected }
                    Self.report(finished, kind, reason, now: now, db)
                    for (device, _, _) in finished {
                        Self.settleMerged(outcome.merged.map { (device, $0) }, deadLetterReason: reason, now: now, db)
                        db.runDeferred(
                            "UPDATE devices SET last_delivery_error = $1::text, live_jobs = live_jobs - 1 WHERE id = $2::text",
                            [.text(reason), .text(device)])
                        db.runDeferred(Self.promoteNext, [.text(device)])
                    }
                    applied[index] = !finished.isEmpty
                case .postpone(let until):
                    applied[index] = try db.run(Self.giveBack, guardValues + [.integer(until)]) == 1
                case .removeDevice(let reason):
                    // APNs refused a token the app has replaced since (PATCH): the device stays, and the job goes back
                    // to be sent to the new token, its attempt not counted.
                    let current = try db.rows("SELECT device_token FROM devices WHERE id = $1::text", [.text(outcome.deviceID)]) {
                        $0.text(0)
                    }
                    if let token = current.first, token != outcome.deviceToken {
                        applied[index] = try db.run(Self.giveBack, guardValues + [.integer(now)]) == 1
                        continue
                    }
                    let finished = try db.rows(
                        "SELECT device_id, public_id, reports_outcome FROM jobs WHERE \(Self.leaseGuard)",
                        guardValues
                    ) { ($0.text(0), $0.text(1), $0.bool(2)) }
                    Self.report(finished, .unregistered, reason, now: now, db)
                    for (device, _, _) in finished {
                        Self.reportWaitingTests(ofDevice: device, .unregistered, reason, now: now, db)
                        try db.run(
                            """
                            INSERT INTO tombstones (device_id, reason, removed_at) VALUES ($1::text, $2::text, $3::bigint)
                            ON CONFLICT (device_id) DO UPDATE SET reason = excluded.reason, removed_at = excluded.removed_at
                            """, [.text(device), .text(reason), .integer(now)])
                        try db.run("DELETE FROM devices WHERE id = $1::text", [.text(device)])
                    }
                    applied[index] = !finished.isEmpty
                }
            }
            // A device's last success is the same `now` for every job of the batch: one update for all of them,
            // which also lowers its live jobs by the heads delivered.
            if !deliveredDevices.isEmpty {
                db.runDeferred(
                    """
                    UPDATE devices SET last_successful_notification = $1::bigint, last_delivery_error = '',
                                       live_jobs = live_jobs - c.delivered, \(DeviceBurst.recordPush(now: "$1::bigint"))
                    FROM unnest($2::text[], $3::integer[]) AS c (id, delivered)
                    WHERE devices.id = c.id
                    """, [.integer(now), .texts(deliveredDevices.keys), .integers(deliveredDevices.values)])
            }
            Self.notifyDeliverers(db)
            return applied
        }
        return applied
    }

    /// Applies the `.delivered` outcomes: deletes the jobs still leased to `worker` at that attempt, completes what
    /// their digests carried, and promotes each device's next job. Returns the devices that had a delivery, with
    /// how many of their heads were deleted.
    private static func finishDeliveries(
        _ outcomes: [JobOutcome], worker: String, now: Int64, applied: inout [Bool],
        _ db: PGConnection
    ) throws -> [String: Int] {
        let indexes = outcomes.indices.filter { outcomes[$0].kind == .delivered }
        guard !indexes.isEmpty else { return [:] }
        let finished = try db.rows(
            """
            DELETE FROM jobs USING unnest($1::bigint[], $2::integer[]) AS o (id, attempt)
            WHERE jobs.id = o.id AND \(LeaseGuard.condition(worker: "$3::text", attempt: "o.attempt", table: "jobs"))
            RETURNING jobs.id, jobs.device_id, jobs.public_id, jobs.reports_outcome
            """,
            [
                .integerArray(indexes.map { outcomes[$0].jobID }), .integerArray(indexes.map { Int64(outcomes[$0].attempt) }),
                .text(worker)
            ]
        ) { ($0.int64(0), $0.text(1), $0.text(2), $0.bool(3)) }
        let devicesByJob = Dictionary(finished.map { ($0.0, $0.1) }, uniquingKeysWith: { first, _ in first })
        report(finished.map { ($0.1, $0.2, $0.3) }, .delivered, "", now: now, db)
        var merged: [(device: String, job: MergedJob)] = []
        for index in indexes {
            guard let device = devicesByJob[outcomes[index].jobID] else { continue }
            applied[index] = true
            merged += outcomes[index].merged.map { (device, $0) }
        }
        settleMerged(merged, deadLetterReason: nil, now: now, db)
        let devices = Dictionary(devicesByJob.values.map { ($0, 1) }, uniquingKeysWith: +)
        if devices.count == 1, let device = devices.first?.key {
            // One device (a trickle) in a statement of its own, planned once (see `lockDevices`).
            db.runDeferred(promoteNext, [.text(device)])
        } else if !devices.isEmpty {
            // Statements without parameters are the settings: sent unprepared, as no plan of them is worth keeping.
            for (sql, values) in promotion(of: devices.keys) { db.runDeferred(sql, values, prepare: !values.isEmpty) }
        }
        return devices
    }

    /// Completes the jobs merged into digests with their heads: deleted when the digest was delivered,
    /// dead-lettered with its reason when it was rejected, and taken off their device's live jobs. Only jobs still
    /// pending on that device, holding the folded alerts the digest carried, are touched: one that gained folded
    /// alerts meanwhile stays, and goes out again with them (at least once: never lost, at worst one alert shown
    /// twice). One statement for all of them, sent with the transaction's next round trip.
    private static func settleMerged(
        _ merged: [(device: String, job: MergedJob)], deadLetterReason: String?, now: Int64, _ db: PGConnection
    ) {
        guard !merged.isEmpty else { return }
        let settle =
            deadLetterReason == nil
            ? "DELETE FROM jobs USING unnest($1::bigint[], $2::text[], $3::integer[]) AS m (id, device_id, folded_count)"
            : """
            UPDATE jobs SET state = 'discarded', finalized_at = $4::bigint, last_error = $5::text
            FROM unnest($1::bigint[], $2::text[], $3::integer[]) AS m (id, device_id, folded_count)
            """
        let values: [PGValue] = [
            .integerArray(merged.map(\.job.id)), .texts(merged.map(\.device)), .integerArray(merged.map { Int64($0.job.foldedCount) })
        ]
        db.runDeferred(
            """
            WITH settled AS (
                \(settle)
                WHERE jobs.id = m.id AND jobs.device_id = m.device_id AND jobs.state = 'pending' AND jobs.folded_count = m.folded_count
                RETURNING jobs.device_id
            )
            UPDATE devices SET live_jobs = live_jobs - s.count
            FROM (SELECT device_id, count(*) AS count FROM settled GROUP BY device_id) AS s
            WHERE devices.id = s.device_id
            """, values + (deadLetterReason.map { [.integer(now), .text($0)] } ?? []))
    }

    /// Records the outcome of the finished jobs that report one (sent with the transaction's next round trip).
    private static func report(
        _ jobs: [(String, String, Bool)], _ kind: ReportedOutcome.Kind, _ reason: String, now: Int64,
        _ db: PGConnection
    ) {
        for (_, publicID, reports) in jobs where reports {
            db.runDeferred(
                """
                INSERT INTO job_outcomes (public_id, outcome, reason, finished_at) VALUES ($1::text, $2::text, $3::text, $4::bigint)
                ON CONFLICT (public_id) DO UPDATE SET outcome = excluded.outcome, reason = excluded.reason,
                                                      finished_at = excluded.finished_at
                """, [.text(publicID), .text(kind.rawValue), .text(reason), .integer(now)])
        }
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

    public func reportedOutcome(publicID: String) throws(StoreError) -> ReportedOutcome? {
        try read { db in
            try db.rows("SELECT outcome, reason FROM job_outcomes WHERE public_id = $1::text", [.text(publicID)]) {
                ReportedOutcome(kind: ReportedOutcome.Kind(rawValue: $0.text(0)) ?? .rejected, reason: $0.text(1))
            }.first
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

    public func purgeReportedOutcomes(before: Int64) throws(StoreError) -> Int {
        try writeStatement { db in try db.run("DELETE FROM job_outcomes WHERE finished_at < $1::bigint", [.integer(before)]) }
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

    public func makeRetryableDue(now: Int64) throws(StoreError) -> Int {
        let count = try writeStatement { db in
            try db.run(
                "UPDATE jobs SET scheduled_at = $1::bigint WHERE state = 'retryable' AND scheduled_at > $1::bigint",
                [.integer(now)])
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
