import Common

/// Enqueue on PostgreSQL: a batch in one transaction, written with a few multi-row statements per chunk.
///
/// SQLite decides each job's fate row by row in SQL (head or pending, folded past DEVICE_QUEUE_MAX, its badge).
/// Here one round trip per row would cost more than the rows themselves, so each chunk locks its devices, reads
/// their state once (live jobs, head, down monitors, newest waiting job), decides every job in Swift exactly as
/// the SQLite statements do, and writes the outcome in one INSERT per table. The device locks make the read state
/// the truth until commit: every writer that changes which job is a device's head locks the device first.
extension PostgresStore {
    /// Rows per INSERT statement of an enqueue batch (8 parameters each; PostgreSQL allows 65,535 per statement).
    static let enqueueChunk = 256

    static let headStates = "('available', 'running', 'retryable')"

    /// Locks the rows of `devices` (sorted, so concurrent transactions lock in one order) and returns those that exist.
    static func lockDevices(_ devices: some Collection<String>, _ db: PGConnection) throws -> Set<String> {
        guard !devices.isEmpty else { return [] }
        return Set(
            try db.rows(
                "SELECT id FROM devices WHERE id = ANY($1::text[]) ORDER BY id FOR NO KEY UPDATE",
                [.textArray(Set(devices))]
            ) { $0.text(0) })
    }

    public func enqueue(_ jobs: some Sequence<NewJob>, now: Int64, ttl: Duration, deviceCap: Int) throws(StoreError) -> [EnqueueResult] {
        let context = EnqueueContext(
            now: now, expiresAt: now + ttl.wholeMilliseconds,
            badgeSince: now - options.monitorRetention.wholeMilliseconds, deviceCap: deviceCap)
        // The batch is read from `jobs` inside the first transaction (chunk by chunk) and kept, so a transaction
        // PostgreSQL aborts to break a deadlock can run again with the same jobs.
        var source = jobs.makeIterator()
        var batch: [NewJob] = []
        var exhausted = false
        let results: [EnqueueResult] = try write { db in
            var results: [EnqueueResult] = []
            var start = 0
            while true {
                while !exhausted && batch.count < start + Self.enqueueChunk {
                    if let job = source.next() { batch.append(job) } else { exhausted = true }
                }
                let chunk = batch[start..<min(batch.count, start + Self.enqueueChunk)]
                if chunk.isEmpty { break }
                results += try Self.enqueue(chunk, context, db)
                start += chunk.count
            }
            if results.contains(where: { $0 != .deviceGone }) { try Self.notifyDeliverers(db) }
            return results
        }
        return results
    }

    struct EnqueueContext {
        let now: Int64
        let expiresAt: Int64
        let badgeSince: Int64
        let deviceCap: Int
    }

    /// A device's state as one chunk sees and changes it.
    private struct DeviceState {
        var live = 0
        var hasHead = false
        var downMonitors: Set<String> = []
        /// Where an alert past the cap is folded: the newest waiting job that is not a Test-button job.
        var tail: Tail?
    }

    private enum Tail {
        case stored(id: Int64, folded: FoldedAlerts)
        case inChunk(row: Int)
    }

    private struct Row {
        var job: NewJob
        var state: String
        var badge: Int
        var folded = FoldedAlerts()
    }

    private static func enqueue(_ chunk: ArraySlice<NewJob>, _ context: EnqueueContext, _ db: PGConnection) throws -> [EnqueueResult] {
        let existing = try lockDevices(chunk.map(\.deviceID), db)
        var devices = try readState(of: existing, chunk: chunk, context, db)

        var results: [EnqueueResult] = []
        var rows: [Row] = []
        var monitorStates: [MonitorKey: Bool] = [:]
        var storedTails: [Int64: (folded: FoldedAlerts, badge: Int)] = [:]
        for job in chunk {
            guard existing.contains(job.deviceID), var device = devices[job.deviceID] else {
                results.append(.deviceGone)
                continue
            }
            defer { devices[job.deviceID] = device }
            if let monitor = job.monitor {
                monitorStates[MonitorKey(device: job.deviceID, monitor: monitor.key)] = monitor.isDown
                if monitor.isDown { device.downMonitors.insert(monitor.key) } else { device.downMonitors.remove(monitor.key) }
            }
            let badge = device.downMonitors.count
            // SPEC §2.4: past the cap, the alert folds into the newest waiting job (never a Test-button job).
            if context.deviceCap < .max, !job.reportsOutcome, device.live >= context.deviceCap,
                let event = AlertEvent(jobPayload: job.payload), let tail = device.tail
            {
                switch tail {
                case .stored(let id, var folded):
                    folded.add(event)
                    device.tail = .stored(id: id, folded: folded)
                    storedTails[id] = (folded, badge)
                case .inChunk(let row):
                    rows[row].folded.add(event)
                    rows[row].badge = badge
                }
                results.append(.merged)
                continue
            }
            rows.append(Row(job: job, state: device.hasHead ? "pending" : "available", badge: badge))
            if device.hasHead && !job.reportsOutcome { device.tail = .inChunk(row: rows.count - 1) }
            device.hasHead = true
            device.live += 1
            results.append(.queued)
        }
        try writeMonitorStates(monitorStates, context, db)
        try insert(rows, context, db)
        for (id, tail) in storedTails {
            try db.run(
                "UPDATE jobs SET folded = $1::bytea, folded_count = $2::integer, badge = $3::integer WHERE id = $4::bigint",
                [.bytes(tail.folded.encoded), .integer(Int64(tail.folded.count)), .integer(Int64(tail.badge)), .integer(id)])
        }
        return results
    }

    private struct MonitorKey: Hashable {
        let device: String
        let monitor: String
    }

    /// Head of every device in the chunk, its live jobs when there is a cap, its down monitors, and its newest
    /// waiting job when the cap may be reached.
    private static func readState(
        of existing: Set<String>, chunk: ArraySlice<NewJob>, _ context: EnqueueContext,
        _ db: PGConnection
    ) throws -> [String: DeviceState] {
        var devices: [String: DeviceState] = [:]
        for device in existing { devices[device] = DeviceState() }
        guard !existing.isEmpty else { return devices }
        let ids = PGValue.textArray(existing)
        for device in try db.rows(
            "SELECT device_id FROM jobs WHERE device_id = ANY($1::text[]) AND state IN \(headStates)",
            [ids], { $0.text(0) })
        {
            devices[device]?.hasHead = true
        }
        if context.deviceCap < .max {
            // Kept on the device row by triggers (migration 7); read after the lock, so it is the committed count.
            for (device, live) in try db.rows("SELECT id, live_jobs FROM devices WHERE id = ANY($1::text[])", [ids], { ($0.text(0), $0.int(1)) }) {
                devices[device]?.live = live
            }
        }
        // Every job's badge counts the device's down monitors, so they are read for every chunk.
        for (device, monitor) in try db.rows(
            """
            SELECT device_id, monitor FROM monitor_states WHERE device_id = ANY($1::text[]) AND down AND updated_at >= $2::bigint
            """, [ids, .integer(context.badgeSince)], { ($0.text(0), $0.text(1)) })
        {
            devices[device]?.downMonitors.insert(monitor)
        }
        let arriving = Dictionary(chunk.map { ($0.deviceID, 1) }, uniquingKeysWith: +)
        let mayReachCap = context.deviceCap < .max && devices.contains { $0.value.live + (arriving[$0.key] ?? 0) > context.deviceCap }
        if mayReachCap {
            for (device, id, folded) in try db.rows(
                """
                SELECT DISTINCT ON (device_id) device_id, id, folded FROM jobs
                WHERE device_id = ANY($1::text[]) AND state = 'pending' AND NOT reports_outcome
                ORDER BY device_id, id DESC
                """, [ids], { ($0.text(0), $0.int64(1), $0.isNull(2) ? FoldedAlerts() : FoldedAlerts(encoded: $0.bytes(2))) })
            {
                devices[device]?.tail = .stored(id: id, folded: folded)
            }
        }
        return devices
    }

    private static func writeMonitorStates(_ states: [MonitorKey: Bool], _ context: EnqueueContext, _ db: PGConnection) throws {
        guard !states.isEmpty else { return }
        var values: [PGValue] = [.integer(context.now)]
        var rows: [String] = []
        for (key, down) in states {
            let first = values.count + 1
            rows.append("($\(first)::text, $\(first + 1)::text, $\(first + 2)::boolean, $1::bigint)")
            values += [.text(key.device), .text(key.monitor), .boolean(down)]
        }
        try db.run(
            """
            INSERT INTO monitor_states (device_id, monitor, down, updated_at) VALUES \(rows.joined(separator: ", "))
            ON CONFLICT (device_id, monitor) DO UPDATE SET down = excluded.down, updated_at = excluded.updated_at
            """, values, prepare: false)
    }

    /// One multi-row INSERT; ids are drawn in row order, which is acceptance order.
    private static func insert(_ rows: [Row], _ context: EnqueueContext, _ db: PGConnection) throws {
        guard !rows.isEmpty else { return }
        var values: [PGValue] = [.integer(context.now), .integer(context.expiresAt)]
        var tuples: [String] = []
        for row in rows {
            let first = values.count + 1
            tuples.append(
                "($\(first)::text, $\(first + 1)::text, $\(first + 2)::text, $\(first + 3)::bytea, $1::bigint, $1::bigint, "
                    + "$2::bigint, $\(first + 4)::boolean, $\(first + 5)::integer, $\(first + 6)::bytea, $\(first + 7)::integer)")
            values += [
                .text(row.job.publicID), .text(row.job.deviceID), .text(row.state), .bytes(row.job.payload),
                .boolean(row.job.reportsOutcome), .integer(Int64(row.badge)),
                row.folded.isEmpty ? .null : .bytes(row.folded.encoded), .integer(Int64(row.folded.count))
            ]
        }
        try db.run(
            """
            INSERT INTO jobs (public_id, device_id, state, payload, created_at, scheduled_at, expires_at, reports_outcome,
                              badge, folded, folded_count)
            VALUES \(tuples.joined(separator: ", "))
            """, values, prepare: false)
    }
}
