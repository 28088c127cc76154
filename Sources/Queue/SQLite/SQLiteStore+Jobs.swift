import Common
import SQLiteDriver

extension SQLiteStore {
    /// The device's live jobs, whether it has a head (read from `jobs_one_head_per_device`), the number its next
    /// job gets (SQLiteStore+DeviceJobs.swift), its digest's seal (`DigestCarry`) and its rowid (which `countNewJobs`
    /// finds the row by, skipping the index on `id` within the same transaction), then one row per monitor whose
    /// last word within the retention (since ?2) was "down", with whether that row was written since ?3 (fresh,
    /// `EnqueuePlan.monitorRefresh`) in the third column; no row when the device is gone.
    static let readDevice = """
        SELECT 'device', d.live_jobs, EXISTS (SELECT 1 FROM jobs h WHERE h.device_id = d.id AND \(isHead("h"))), d.next_seq, NULL,
               d.digest_sealed_through, d.rowid
        FROM devices d WHERE d.id = ?1
        UNION ALL
        SELECT 'down', 0, m.updated_at >= ?3, 0, m.monitor, 0, 0 FROM monitor_states m
        WHERE m.device_id = ?1 AND m.down = 1 AND m.updated_at >= ?2
        """

    /// A new job: its state (head or pending), folded alerts and badge decided by `EnqueuePlan`. `VALUES`, not
    /// `INSERT … SELECT`: SQLite first copies a SELECT's rows into a temporary B-tree whenever the table has
    /// triggers, which built one for every job. The writer's connection fires no trigger (`SQLiteStore.init`):
    /// `countNewJobs` counts the batch's rows on their devices.
    static let insertJob = """
        INSERT INTO jobs (public_id, device_id, state, payload, created_at, scheduled_at, expires_at, reports_outcome, badge,
                          device_seq, folded, folded_count)
        VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
        """

    /// Whether the job `alias` is its device's head: `jobs_one_head_per_device`'s condition word for word, which is
    /// what lets SQLite answer it from that index. Comparisons, not `IN (…)` (migration 10).
    static func isHead(_ alias: String) -> String {
        "(\(alias).state = 'available' OR \(alias).state = 'running' OR \(alias).state = 'retryable')"
    }

    static let batchUpdate = "UPDATE OR FAIL"

    /// The badge: monitors of `device` whose last word, within the retention, was "down".
    static func downMonitors(_ device: String, since: String) -> String {
        "(SELECT count(*) FROM monitor_states m WHERE m.device_id = \(device) AND m.down = 1 AND m.updated_at >= \(since))"
    }

    /// A batch's new jobs on their device (?2 of them): counted live, and the device's next number (?3) past them.
    static let countNewJobs = "UPDATE devices SET live_jobs = live_jobs + ?2, next_seq = ?3 WHERE rowid = ?1"

    /// Records a monitor's state for the badge.
    private static let recordMonitor = """
        INSERT INTO monitor_states (device_id, monitor, down, updated_at) VALUES (?1, ?2, ?3, ?4)
        ON CONFLICT (device_id, monitor) DO UPDATE SET down = excluded.down, updated_at = excluded.updated_at
        """

    /// One: SQLite has one writer at a time.
    public var concurrentEnqueues: Int { 1 }

    /// Reads the batch's devices, lets `EnqueuePlan` decide, and applies its writes row by row.
    public func enqueue(_ jobs: some Sequence<NewJob>, now: Int64, ttl: Duration, deviceCap: Int) throws(StoreError) -> [EnqueueResult] {
        let expiresAt = now + ttl.wholeMilliseconds
        let badgeSince = now - options.monitorRetention.wholeMilliseconds
        let freshSince = now - EnqueuePlan.monitorRefresh(retention: options.monitorRetention).wholeMilliseconds
        let batch = Array(jobs)
        return try write { db in
            var devices: [String: EnqueuePlan.DeviceState] = [:]
            // The number each device's next job gets: its place in the device's queue, kept to this store.
            var numbers: [String: Numbering] = [:]
            devices.reserveCapacity(batch.count)
            numbers.reserveCapacity(batch.count)
            let read = try db.statement(Self.readDevice)
            var seen: Set<String> = []
            seen.reserveCapacity(batch.count)
            for job in batch where seen.insert(job.deviceID).inserted {
                // Gathered here and stored once: a device's monitor rows add to it without a lookup each.
                var device: EnqueuePlan.DeviceState?
                // `flag`: the device has a head ('device'), the monitor's row is fresh ('down').
                try read.forEachRow([.text(job.deviceID), .integer(badgeSince), .integer(freshSince)]) { row in
                    let flag = row.int(2) == 1
                    if row.text(0) == "device" {
                        device = EnqueuePlan.DeviceState(storedLive: row.int(1), hasHead: flag, sealedThrough: row.int64(5))
                        numbers[job.deviceID] = Numbering(row: row.int64(6), stored: row.int64(3))
                    } else {
                        let monitor = row.isNull(4) ? "" : row.text(4)
                        device?.downMonitors.insert(monitor)
                        if flag { device?.freshDownMonitors.insert(monitor) }
                    }
                }
                devices[job.deviceID] = device
            }
            let reads = EnqueuePlan.reads(for: batch, devices: devices, cap: deviceCap)
            for id in reads.waitingTests { devices[id]?.waitingTest = try Self.waitingTest(device: id, db) }
            for id in reads.tails { devices[id]?.tail = try Self.newestFoldableJob(device: id, db) }
            let plan = EnqueuePlan.plan(batch, devices: devices, cap: deviceCap)
            try Self.apply(plan, numbers: numbers, now: now, expiresAt: expiresAt, db)
            return plan.results
        }
    }

    /// A device's numbers in one batch: its row's, and its next job's as stored and as the batch's rows leave it.
    private struct Numbering {
        let row: Int64
        let stored: Int64
        var next: Int64

        init(row: Int64, stored: Int64) {
            self.row = row
            self.stored = stored
            next = stored
        }
    }

    /// The plan's writes: counts left high healed first (the rows are counted after), then the monitor states, the
    /// rows numbered in their devices' queues and counted on them, and the folds into stored tails.
    private static func apply(_ plan: EnqueuePlan.Batch, numbers: [String: Numbering], now: Int64, expiresAt: Int64, _ db: SQLiteConnection) throws {
        for device in plan.healed { try db.statement("UPDATE devices SET live_jobs = 0 WHERE id = ?").run([.text(device)]) }
        for state in plan.monitorStates {
            try db.statement(recordMonitor).run([.text(state.device), .text(state.monitor), .integer(state.down ? 1 : 0), .integer(now)])
        }
        var numbers = numbers
        let insert = try db.statement(insertJob)
        for row in plan.rows {
            guard let slot = numbers.index(forKey: row.job.deviceID) else { continue }  // every row's device was read
            let number = numbers.values[slot].next
            numbers.values[slot].next += 1
            try insert.run([
                .text(row.job.publicID), .text(row.job.deviceID), .text(row.isHead ? JobState.available.rawValue : JobState.pending.rawValue),
                .blob(row.job.payload), .integer(now), .integer(expiresAt), .integer(row.waits ? 1 : 0), .integer(Int64(row.badge)),
                .integer(number), row.folded.isEmpty ? .null : .blob(row.folded.encoded), .integer(Int64(row.folded.count))
            ])
        }
        let count = try db.statement(countNewJobs)
        for numbering in numbers.values where numbering.next > numbering.stored {
            try count.run([.integer(numbering.row), .integer(numbering.next - numbering.stored), .integer(numbering.next)])
        }
        for fold in plan.tailFolds {
            // The tail's push now ends with these alerts: their badge, and their JOB_TTL.
            try db.statement("UPDATE jobs SET folded = ?1, folded_count = ?2, badge = ?3, expires_at = max(expires_at, ?4) WHERE id = ?5")
                .run([
                    .blob(fold.folded.encoded), .integer(Int64(fold.folded.count)), .integer(Int64(fold.badge)), .integer(expiresAt),
                    .integer(fold.id)
                ])
        }
        for (device, badge) in plan.testBadges {
            // Through `jobs_waiting_tests` (migration 13): the partial index's condition word for word.
            try db.statement("UPDATE jobs SET badge = ?1 WHERE device_id = ?2 AND reports_outcome = 1 AND state != 'discarded'")
                .run([.integer(Int64(badge)), .text(device)])
        }
    }

    /// The device's live job a Test request waits on, found through `jobs_waiting_tests` (migration 13).
    static func waitingTest(device: String, _ db: SQLiteConnection) throws -> EnqueuePlan.WaitingTest? {
        try db.statement(
            "SELECT public_id, payload FROM jobs WHERE device_id = ? AND reports_outcome = 1 AND state != 'discarded' LIMIT 1"
        ).rows([.text(device)]) { EnqueuePlan.WaitingTest(publicID: $0.text(0), payload: $0.blob(1)) }.first
    }

    public func claim(worker: String, limit: Int, now: Int64, lease: Duration) throws(StoreError) -> [ClaimedJob] {
        guard limit > 0 else { return [] }
        return try write { db in try Self.claim(worker: worker, limit: limit, now: now, lease: lease, db) }
    }

    /// `claim`'s statements, inside the caller's transaction.
    static func claim(worker: String, limit: Int, now: Int64, lease: Duration, _ db: SQLiteConnection) throws -> [ClaimedJob] {
        let leaseExpiresAt = now + lease.wholeMilliseconds
        // The jobs leased, each then given its device's columns in place: a job copied out and back (or into a
        // new array, or sorted into one) retained and released its strings and payload each time.
        // OR FAIL: a multi-row UPDATE that may abort keeps a statement journal (the pages it changes, to undo the
        // statement alone), and past SQLite's 64 KiB that journal is a temporary file, created, written and unlinked
        // on every claim batch, with copies of the claimed jobs' content, outside the database `secure_delete`
        // keeps clean. The claim runs in its own transaction (or the finish's), which rolls back whole on any error,
        // so undoing the statement alone is never needed (docs/performance.md, twenty-third session).
        var claimed = try db.statement(
            """
            UPDATE OR FAIL jobs SET state = 'running', attempt = attempt + 1, attempted_at = ?1, attempted_by = ?2,
                            lease_expires_at = ?3
            WHERE id IN (SELECT id FROM jobs WHERE state IN ('available', 'retryable') AND scheduled_at <= ?1
                         ORDER BY scheduled_at LIMIT ?4)
            RETURNING id, public_id, device_id, payload, attempt, created_at, expires_at, reports_outcome, folded, badge
            """
        ).rows([.integer(now), .text(worker), .integer(leaseExpiresAt), .integer(Int64(limit))]) {
            ClaimedJob(
                id: $0.int64(0), publicID: $0.text(1), deviceID: $0.text(2), deviceToken: "", downNotificationLevel: .normal,
                payload: $0.blob(3), attempt: $0.int(4), createdAt: $0.int64(5), expiresAt: $0.int64(6), reportsOutcome: $0.int(7) == 1,
                folded: $0.isNull(8) ? FoldedAlerts() : FoldedAlerts(encoded: $0.blob(8)), badge: $0.isNull(9) ? nil : $0.int(9),
                leaseExpiresAt: leaseExpiresAt)
        }
        let lookup = try db.statement(
            """
            SELECT device_token, down_notification_level, apns_environment, \(DeviceBurst.recentPushes(now: "?2")),
                   last_successful_notification
            FROM devices d WHERE id = ?1
            """)
        var orphans: [Int] = []
        for index in claimed.indices {
            let deviceID = claimed[index].deviceID
            var found = false
            try lookup.forEachRow([.text(deviceID), .integer(now)]) { device in
                found = true
                claimed[index].deviceToken = device.text(0)
                claimed[index].downNotificationLevel = Device.DownNotificationLevel(rawValue: device.text(1)) ?? .normal
                claimed[index].environment = device.isNull(2) ? nil : Settings.APNsEnvironment(rawValue: device.text(2))
                claimed[index].recentPushes = device.int(3)
                claimed[index].lastPushAt = device.optionalInt64(4)
            }
            // Deleting a device deletes its jobs in the same transaction (deleteDevice), so a job whose device is
            // gone exists only if a binary older than schema 12 deleted the device (it relied on the foreign
            // key's cascade) during an upgrade. Such jobs can never be delivered: this one and every other job
            // of the device go, the way the cascade would have removed them (a scan of the queue, once per
            // such device).
            if !found {
                try db.statement("DELETE FROM jobs WHERE device_id = ?").run([.text(deviceID)])
                orphans.append(index)
            }
        }
        for index in orphans.reversed() { claimed.remove(at: index) }
        // Acceptance order, which is what callers log and send in.
        claimed.sort { $0.id < $1.id }
        return claimed
    }

    public func pendingJobs(deviceID: String, limit: Int) throws(StoreError) -> [PendingJob] {
        try read { db in try Self.pendingJobs(device: deviceID, limit: limit, db).map(\.job) }
    }

    public func reportedOutcomes(publicIDs: [String]) throws(StoreError) -> [String: ReportedOutcome] {
        guard !publicIDs.isEmpty else { return [:] }
        return try read { db in
            var found: [String: ReportedOutcome] = [:]
            for (placeholders, values) in Self.inLists(publicIDs.map { .text($0) }) {
                let rows = try db.statement("SELECT public_id, outcome, reason FROM job_outcomes WHERE public_id IN (\(placeholders))")
                    .rows(values) {
                        ($0.text(0), ReportedOutcome(kind: ReportedOutcome.Kind(rawValue: $0.text(1)) ?? .rejected, reason: $0.text(2)))
                    }
                for (id, outcome) in rows { found[id] = outcome }
            }
            return found
        }
    }

    public func changeCounter() throws(StoreError) -> Int64 {
        try read { db in try db.statement("PRAGMA data_version").rows { $0.int64(0) }.first ?? 0 }
    }

    /// Nothing: SQLite tells no other process of a commit, so a deliverer in a process of its own polls
    /// `changeCounter()` (PRAGMA data_version: no disk I/O), and `serve`'s ingest wakes its engine itself.
    public func wakeOnChanges(_ wake: @escaping @Sendable () -> Void) {}

    public func stopWakingOnChanges() {}

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
        // OR FAIL, as the claim: no statement journal (a crashed deliverer's thousand pushes would have spilled one,
        // with their content, to a temporary file), and the statement's transaction rolls back whole on any error.
        try write { db in
            try db.statement(
                """
                UPDATE OR FAIL jobs SET state = 'retryable', scheduled_at = ?1, last_error = 'lease expired',
                                attempted_by = NULL, lease_expires_at = NULL
                WHERE state = 'running' AND lease_expires_at <= ?1
                """
            ).run([.integer(now)])
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
}
