import Common

extension SQLiteStore {
    /// The device's live jobs, whether it has a head (read from `jobs_one_head_per_device`), its badge, the count
    /// of down monitors right now (after this alert's own state was recorded), and the number its next job gets
    /// (SQLiteStore+DeviceJobs.swift); no row when the device is gone.
    static let readDevice = """
        SELECT d.live_jobs, EXISTS (SELECT 1 FROM jobs h WHERE h.device_id = d.id AND \(isHead("h"))),
               \(downMonitors("d.id", since: "?2")), d.next_seq
        FROM devices d WHERE d.id = ?1
        """

    /// A new job is the device's head when the device has no head, otherwise it waits as `pending`. `VALUES`, not
    /// `INSERT … SELECT`: SQLite first copies a SELECT's rows into a temporary B-tree whenever the table has
    /// triggers, which built one for every job. Its insert trigger counts the job live and moves the device's next
    /// number past `device_seq` (?9).
    static let insertJob = """
        INSERT INTO jobs (public_id, device_id, state, payload, created_at, scheduled_at, expires_at, reports_outcome, badge,
                          device_seq)
        VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6, ?7, ?8, ?9)
        """

    /// Whether the job `alias` is its device's head: `jobs_one_head_per_device`'s condition word for word, which is
    /// what lets SQLite answer it from that index. Comparisons, not `IN (…)` (migration 10).
    static func isHead(_ alias: String) -> String {
        "(\(alias).state = 'available' OR \(alias).state = 'running' OR \(alias).state = 'retryable')"
    }

    /// The badge: monitors of `device` whose last word, within the retention, was "down".
    static func downMonitors(_ device: String, since: String) -> String {
        "(SELECT count(*) FROM monitor_states m WHERE m.device_id = \(device) AND m.down = 1 AND m.updated_at >= \(since))"
    }

    /// Records a monitor's state for the badge, only for a device that exists (`readDevice` then says whether it
    /// did; a state for a device deleted meanwhile would break the foreign key and the whole batch).
    private static let recordMonitor = """
        INSERT INTO monitor_states (device_id, monitor, down, updated_at)
        SELECT id, ?2, ?3, ?4 FROM devices WHERE id = ?1
        ON CONFLICT (device_id, monitor) DO UPDATE SET down = excluded.down, updated_at = excluded.updated_at
        """

    /// Every completion's condition: this job (?1), still leased by this worker (?2) at this attempt (?3).
    static let leaseGuard = "id = ?1 AND \(LeaseGuard.condition(worker: "?2", attempt: "?3"))"
    /// Gives a leased job back unsent, due at ?4, its attempt not counted (`leaseGuard`'s ?1–?3).
    static let giveBack = """
        UPDATE jobs SET state = 'available', scheduled_at = ?4, attempt = max(attempt - 1, 0),
                        attempted_by = NULL, lease_expires_at = NULL
        WHERE \(leaseGuard)
        """

    /// One: SQLite has one writer at a time.
    public var concurrentEnqueues: Int { 1 }

    public func enqueue(_ jobs: some Sequence<NewJob>, now: Int64, ttl: Duration, deviceCap: Int) throws(StoreError) -> [EnqueueResult] {
        let expiresAt = now + ttl.wholeMilliseconds
        let badgeSince = now - options.monitorRetention.wholeMilliseconds
        return try write { db in
            let device = try db.statement(Self.readDevice)
            let insert = try db.statement(Self.insertJob)
            let record = try db.statement(Self.recordMonitor)
            var results: [EnqueueResult] = []
            for job in jobs {
                if let monitor = job.monitor {
                    try record.run([.text(job.deviceID), .text(monitor.key), .integer(monitor.isDown ? 1 : 0), .integer(now)])
                }
                guard
                    let (counted, hasHead, badge, number) = try device.rows(
                        [.text(job.deviceID), .integer(badgeSince)], { ($0.int(0), $0.int(1) == 1, $0.int(2), $0.int64(3)) }
                    ).first
                else {
                    results.append(.deviceGone)
                    continue
                }
                var live = counted
                if !hasHead, live != 0 {
                    // Every live job waits behind its device's head, so no head means none is live. A count left
                    // high (a deliverer older than schema 11 still running through the upgrade, whose finish does
                    // not lower it) heals here, the next time the device is idle.
                    try db.statement("UPDATE devices SET live_jobs = 0 WHERE id = ?").run([.text(job.deviceID)])
                    live = 0
                }
                let waitingTest = job.reportsOutcome && hasHead ? try Self.waitingTest(device: job.deviceID, db) : nil
                let waits: Bool
                switch EnqueuePlan.decide(job, device: EnqueuePlan.Device(live: live, waitingTest: waitingTest), cap: deviceCap) {
                case .sameAsWaitingTest(let publicID):
                    results.append(.sameAsWaitingTest(publicID: publicID))
                    continue
                case .foldIntoTail:
                    let folded = try Self.fold(job, badgeSince: badgeSince, expiresAt: expiresAt, db)
                    results.append(folded ? .merged : .deviceFull)
                    continue
                case .store(let decided):
                    waits = decided
                }
                try insert.run([
                    .text(job.publicID), .text(job.deviceID), .text(hasHead ? JobState.pending.rawValue : JobState.available.rawValue),
                    .blob(job.payload), .integer(now), .integer(expiresAt), .integer(waits ? 1 : 0), .integer(Int64(badge)),
                    .integer(number)
                ])
                results.append(waits || !job.reportsOutcome ? .queued : .queuedAsAlert)
            }
            return results
        }
    }

    /// The device's live job a Test request waits on, found through `jobs_waiting_tests` (migration 13).
    static func waitingTest(device: String, _ db: SQLiteConnection) throws -> EnqueuePlan.WaitingTest? {
        try db.statement(
            "SELECT public_id, payload FROM jobs WHERE device_id = ? AND reports_outcome = 1 AND state != 'discarded' LIMIT 1"
        ).rows([.text(device)]) { EnqueuePlan.WaitingTest(publicID: $0.text(0), payload: $0.blob(1)) }.first
    }

    /// SPEC §2.4: a device at its cap of live jobs gets its new alert folded into its newest waiting job (never
    /// a Test-button job, which is answered on its own). False when the device has no such job: the caller then
    /// refuses the alert for this device (`EnqueueResult.deviceFull`). The count is kept on the device row: raised
    /// by a trigger on insert, lowered by `finish` (migrations 7 and 11).
    private static func fold(_ job: NewJob, badgeSince: Int64, expiresAt: Int64, _ db: SQLiteConnection) throws -> Bool {
        guard let event = AlertEvent(jobPayload: job.payload),
            let (tailID, stored) = try newestFoldableJob(device: job.deviceID, db)
        else { return false }
        var folded = FoldedAlerts(encoded: stored)
        folded.add(event)
        // The tail's push now ends with this alert, so it carries the badge as of this alert, and it lives (and asks
        // APNs to keep it for an offline phone) for this alert's JOB_TTL.
        try db.statement(
            """
            UPDATE jobs SET folded = ?1, folded_count = ?2, badge = \(downMonitors("?4", since: "?5")), expires_at = max(expires_at, ?6)
            WHERE id = ?3
            """
        ).run([
            .blob(folded.encoded), .integer(Int64(folded.count)), .integer(tailID), .text(job.deviceID), .integer(badgeSince),
            .integer(expiresAt)
        ])
        return true
    }

    public func claim(worker: String, limit: Int, now: Int64, lease: Duration) throws(StoreError) -> [ClaimedJob] {
        guard limit > 0 else { return [] }
        return try write { db in
            let leased = try db.statement(
                """
                UPDATE jobs SET state = 'running', attempt = attempt + 1, attempted_at = ?1, attempted_by = ?2,
                                lease_expires_at = ?3
                WHERE id IN (SELECT id FROM jobs WHERE state IN ('available', 'retryable') AND scheduled_at <= ?1
                             ORDER BY scheduled_at LIMIT ?4)
                RETURNING id, public_id, device_id, payload, attempt, created_at, expires_at, reports_outcome, folded, badge,
                          device_seq
                """
            ).rows([.integer(now), .text(worker), .integer(now + lease.wholeMilliseconds), .integer(Int64(limit))]) {
                (
                    $0.int64(0), $0.text(1), $0.text(2), $0.blob(3), $0.int(4), $0.int64(5), $0.int64(6), $0.int(7) == 1,
                    $0.isNull(8) ? FoldedAlerts() : FoldedAlerts(encoded: $0.blob(8)), $0.isNull(9) ? nil : $0.int(9), $0.int64(10)
                )
            }
            let lookup = try db.statement(
                """
                SELECT device_token, down_notification_level, apns_environment, \(DeviceBurst.recentPushes(now: "?2")),
                       last_successful_notification
                FROM devices d WHERE id = ?1
                """)
            var claimed: [ClaimedJob] = []
            claimed.reserveCapacity(leased.count)
            for (id, publicID, deviceID, payload, attempt, createdAt, expiresAt, reportsOutcome, folded, badge, number) in leased {
                // Deleting a device deletes its jobs in the same transaction (deleteDevice), so a job whose device is
                // gone exists only if a binary older than schema 12 deleted the device (it relied on the foreign
                // key's cascade) during an upgrade. Such jobs can never be delivered: this one and every other job
                // of the device go, the way the cascade would have removed them (a scan of the queue, once per
                // such device).
                guard
                    let (token, level, environment, recentPushes, lastPushAt) = try lookup.rows(
                        [.text(deviceID), .integer(now)],
                        {
                            (
                                $0.text(0), $0.text(1), $0.isNull(2) ? nil : Settings.APNsEnvironment(rawValue: $0.text(2)), $0.int(3),
                                $0.optionalInt64(4)
                            )
                        }
                    ).first
                else {
                    try db.statement("DELETE FROM jobs WHERE device_id = ?").run([.text(deviceID)])
                    continue
                }
                claimed.append(
                    ClaimedJob(
                        id: id, publicID: publicID, deviceID: deviceID, deviceToken: token,
                        downNotificationLevel: Device.DownNotificationLevel(rawValue: level) ?? .normal,
                        payload: payload, attempt: attempt, createdAt: createdAt, expiresAt: expiresAt,
                        reportsOutcome: reportsOutcome, folded: folded, badge: badge, environment: environment,
                        recentPushes: recentPushes, lastPushAt: lastPushAt, leaseExpiresAt: now + lease.wholeMilliseconds,
                        queueNumber: number))
            }
            // Acceptance order, which is what callers log and send in.
            return claimed.sorted { $0.id < $1.id }
        }
    }

    public func finish(_ outcomes: [JobOutcome], worker: String, now: Int64) throws(StoreError) -> [Bool] {
        guard !outcomes.isEmpty else { return [] }
        return try write { db in
            // The outcome names the job's device, public id and number (as claimed; they never change), so nothing is
            // read back: `DELETE … RETURNING` buffered its row in a temporary B-tree, ~3.6 µs a delivered push.
            let delete = try db.statement("DELETE FROM jobs WHERE \(Self.leaseGuard)")
            // Device → the live jobs this batch delivered (a head and the jobs merged into it): `devices.live_jobs`
            // is lowered by the statements that end live jobs (migration 11), here in the device's success update.
            var delivered: [String: Int] = [:]
            var applied: [Bool] = []
            applied.reserveCapacity(outcomes.count)
            for outcome in outcomes {
                let guardValues: [SQLiteValue] = [.integer(outcome.jobID), .text(worker), .integer(Int64(outcome.attempt))]
                let device = outcome.deviceID
                switch outcome.kind {
                case .delivered:
                    let finished = try delete.run(guardValues) == 1
                    if finished {
                        try Self.report(outcome, .delivered, "", now: now, db)
                        let settled = try Self.settleMerged(outcome.merged, device: device, deadLetterReason: nil, now: now, db)
                        delivered[device, default: 0] += 1 + settled
                        try Self.promoteNext(device: device, after: outcome.queueNumber, db)
                    }
                    applied.append(finished)
                case .retry(let at, let error):
                    let changed = try db.statement(
                        """
                        UPDATE jobs SET state = 'retryable', scheduled_at = ?4, last_error = ?5,
                                        attempted_by = NULL, lease_expires_at = NULL
                        WHERE \(Self.leaseGuard)
                        """
                    ).run(guardValues + [.integer(at), .text(error)])
                    applied.append(changed == 1)
                case .deadLetter(let reason), .abandon(let reason):
                    let finished =
                        try db.statement(
                            """
                            UPDATE jobs SET state = 'discarded', finalized_at = ?4, last_error = ?5,
                                            attempted_by = NULL, lease_expires_at = NULL
                            WHERE \(Self.leaseGuard)
                            """
                        ).run(guardValues + [.integer(now), .text(reason)]) == 1
                    if finished {
                        let kind: ReportedOutcome.Kind = if case .abandon = outcome.kind { .failed } else { .rejected }
                        try Self.report(outcome, kind, reason, now: now, db)
                        let settled = try Self.settleMerged(outcome.merged, device: device, deadLetterReason: reason, now: now, db)
                        try db.statement("UPDATE devices SET last_delivery_error = ?1, live_jobs = live_jobs - ?3 WHERE id = ?2")
                            .run([.text(reason), .text(device), .integer(Int64(1 + settled))])
                        try Self.promoteNext(device: device, after: outcome.queueNumber, db)
                    }
                    applied.append(finished)
                case .postpone(let until):
                    applied.append(try db.statement(Self.giveBack).run(guardValues + [.integer(until)]) == 1)
                case .removeDevice(let reason):
                    let current = try db.statement("SELECT device_token FROM devices WHERE id = ?").rows([.text(device)]) { $0.text(0) }
                    // APNs refused a token the app has replaced since (PATCH): the device stays, and the job goes back
                    // to be sent to the new token, its attempt not counted.
                    if let token = current.first, token != outcome.deviceToken {
                        applied.append(try db.statement(Self.giveBack).run(guardValues + [.integer(now)]) == 1)
                        continue
                    }
                    let leased = try db.statement("SELECT 1 FROM jobs WHERE \(Self.leaseGuard)").rows(guardValues) { $0.int(0) }.isEmpty == false
                    if leased {
                        try Self.report(outcome, .unregistered, reason, now: now, db)
                        try db.statement("INSERT OR REPLACE INTO tombstones (device_id, reason, removed_at) VALUES (?, ?, ?)")
                            .run([.text(device), .text(reason), .integer(now)])
                        _ = try Self.deleteDevice(device, reporting: (.unregistered, reason, now), db)
                    }
                    applied.append(leased)
                }
            }
            // A device's last success is the same `now` for every job of the batch: one update per device.
            let success = try db.statement(
                """
                UPDATE devices SET live_jobs = live_jobs - ?3, last_successful_notification = ?1, last_delivery_error = '',
                                   \(DeviceBurst.recordPush(now: "?1"))
                WHERE id = ?2
                """)
            for (device, ended) in delivered { try success.run([.integer(now), .text(device), .integer(Int64(ended))]) }
            return applied
        }
    }

    public func pendingJobs(deviceID: String, limit: Int) throws(StoreError) -> [PendingJob] {
        try read { db in try Self.pendingJobs(device: deviceID, limit: limit, db) }
    }

    /// Completes the jobs merged into a digest with the digest's head: deleted when it was delivered,
    /// dead-lettered with its reason when it was rejected. Only jobs still pending on that device, holding the
    /// folded alerts the digest carried, are touched: one that gained folded alerts meanwhile stays, and goes out
    /// again with them (at least once: never lost, at worst one alert shown twice). Returns how many it settled:
    /// live jobs that ended, which the caller takes off the device's live count.
    private static func settleMerged(
        _ merged: [MergedJob], device: String, deadLetterReason: String?, now: Int64,
        _ db: SQLiteConnection
    ) throws -> Int {
        guard !merged.isEmpty else { return 0 }
        let fence = "id = ? AND device_id = ? AND state = 'pending' AND folded_count = ?"
        let settle = try db.statement(
            deadLetterReason == nil
                ? "DELETE FROM jobs WHERE \(fence)"
                : "UPDATE jobs SET state = 'discarded', finalized_at = ?, last_error = ? WHERE \(fence)")
        // Bound, never pasted into the text: the connection keeps one prepared statement per distinct text.
        let reason: [SQLiteValue] = deadLetterReason.map { [.integer(now), .text($0)] } ?? []
        var settled = 0
        for job in merged {
            settled += try settle.run(reason + [.integer(job.id), .text(device), .integer(Int64(job.foldedCount))])
        }
        return settled
    }

    /// Records the outcome of a finished job that reports one.
    private static func report(
        _ outcome: JobOutcome, _ kind: ReportedOutcome.Kind, _ reason: String, now: Int64, _ db: SQLiteConnection
    ) throws {
        guard outcome.reportsOutcome else { return }
        try db.statement("INSERT OR REPLACE INTO job_outcomes (public_id, outcome, reason, finished_at) VALUES (?, ?, ?, ?)")
            .run([.text(outcome.publicID), .text(kind.rawValue), .text(reason), .integer(now)])
    }

    public func reportedOutcome(publicID: String) throws(StoreError) -> ReportedOutcome? {
        try read { db in
            try db.statement("SELECT outcome, reason FROM job_outcomes WHERE public_id = ?").rows([.text(publicID)]) {
                ReportedOutcome(kind: ReportedOutcome.Kind(rawValue: $0.text(0)) ?? .rejected, reason: $0.text(1))
            }.first
        }
    }

    public func reportedOutcomes(publicIDs: [String]) throws(StoreError) -> [String: ReportedOutcome] {
        guard !publicIDs.isEmpty else { return [:] }
        return try read { db in
            var found: [String: ReportedOutcome] = [:]
            // SQLite binds at most 32,766 parameters per statement; the waiter holds at most a thousand. The list is
            // padded with NULLs (which match nothing) to a power of two: the connection keeps every statement text it
            // prepared, so one text per list length would leave up to 512 of them behind.
            for start in stride(from: 0, to: publicIDs.count, by: 512) {
                let chunk = publicIDs[start..<min(start + 512, publicIDs.count)]
                var slots = 1
                while slots < chunk.count { slots *= 2 }
                let placeholders = Array(repeating: "?", count: slots).joined(separator: ",")
                let values = chunk.map { SQLiteValue.text($0) } + Array(repeating: .null, count: slots - chunk.count)
                let rows = try db.statement("SELECT public_id, outcome, reason FROM job_outcomes WHERE public_id IN (\(placeholders))")
                    .rows(values) {
                        ($0.text(0), ReportedOutcome(kind: ReportedOutcome.Kind(rawValue: $0.text(1)) ?? .rejected, reason: $0.text(2)))
                    }
                for (id, outcome) in rows { found[id] = outcome }
            }
            return found
        }
    }

    public func purgeReportedOutcomes(before: Int64) throws(StoreError) -> Int {
        try write { db in try db.statement("DELETE FROM job_outcomes WHERE finished_at < ?").run([.integer(before)]) }
    }

    public func changeCounter() throws(StoreError) -> Int64 {
        try read { db in try db.statement("PRAGMA data_version").rows { $0.int64(0) }.first ?? 0 }
    }

    public func release(jobIDs: [Int64], worker: String, now: Int64) throws(StoreError) -> Int {
        try write { db in
            let release = try db.statement(
                """
                UPDATE jobs SET state = 'available', attempt = max(attempt - 1, 0), scheduled_at = ?1,
                                attempted_by = NULL, lease_expires_at = NULL
                WHERE id = ?2 AND \(LeaseGuard.condition(worker: "?3", attempt: nil))
                """)
            var count = 0
            for id in jobIDs { count += try release.run([.integer(now), .integer(id), .text(worker)]) }
            return count
        }
    }

    public func rescueExpiredLeases(now: Int64) throws(StoreError) -> Int {
        try write { db in
            try db.statement(
                """
                UPDATE jobs SET state = 'retryable', scheduled_at = ?1, last_error = 'lease expired',
                                attempted_by = NULL, lease_expires_at = NULL
                WHERE state = 'running' AND lease_expires_at <= ?1
                """
            ).run([.integer(now)])
        }
    }

    public func makeRetryableDue(now: Int64) throws(StoreError) -> Int {
        try write { db in
            try db.statement("UPDATE jobs SET scheduled_at = ?1 WHERE state = 'retryable' AND scheduled_at > ?1").run([.integer(now)])
        }
    }

    public func makeNextRetryDue(now: Int64) throws(StoreError) -> Bool {
        try write { db in
            // The state test repeats jobs_due's condition so SQLite walks that index in retry order.
            try db.statement(
                """
                UPDATE jobs SET scheduled_at = ?1
                WHERE id = (SELECT id FROM jobs WHERE state IN ('available', 'retryable') AND state = 'retryable'
                            AND scheduled_at > ?1 ORDER BY scheduled_at LIMIT 1)
                """
            ).run([.integer(now)])
        } == 1
    }

    public func hasDueJobs(now: Int64) throws(StoreError) -> Bool {
        try read { db in
            try db.statement(
                """
                SELECT EXISTS (SELECT 1 FROM jobs WHERE state IN ('available', 'retryable') AND scheduled_at <= ?)
                """
            ).rows([.integer(now)]) { $0.int(0) == 1 }.first ?? false
        }
    }

    public func liveJobCount() throws(StoreError) -> Int {
        try read { db in
            // The per-device live counts (migrations 7 and 11): counting the jobs themselves scanned the whole
            // table, once a second on ingest's writer thread (QUEUE_MAX), a million rows deep in a backlog.
            try db.statement("SELECT coalesce(sum(live_jobs), 0) FROM devices").rows { $0.int(0) }.first ?? 0
        }
    }
}

extension SQLiteStore {
    public func recordPause(worker: String, reason: String?, now: Int64) throws(StoreError) {
        _ = try write { db in
            if let reason {
                try db.statement("INSERT OR REPLACE INTO delivery_pauses (worker, reason, updated_at) VALUES (?, ?, ?)")
                    .run([.text(worker), .text(reason), .integer(now)])
            } else {
                try db.statement("DELETE FROM delivery_pauses WHERE worker = ?").run([.text(worker)])
            }
        }
    }

    public func currentPause(since: Int64) throws(StoreError) -> String? {
        try read { db in
            try db.statement("SELECT reason FROM delivery_pauses WHERE updated_at >= ? ORDER BY updated_at DESC LIMIT 1")
                .rows([.integer(since)]) { $0.text(0) }.first
        }
    }
}
