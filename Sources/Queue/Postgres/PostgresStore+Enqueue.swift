import Common

/// Enqueue on PostgreSQL: a batch in one transaction, written with a few multi-row statements per chunk.
///
/// SQLite decides each job's fate row by row in SQL (head or pending, folded past DEVICE_QUEUE_MAX, its badge).
/// Here one round trip per row would cost more than the rows themselves, so each chunk locks its devices (reading
/// their live jobs), reads the rest of their state in one statement (head, down monitors; the newest waiting job
/// only when the cap may be reached), decides every job in Swift exactly as the SQLite statements do, and writes
/// the outcome in one INSERT per table. The device locks make the read state the truth until commit: every writer
/// that changes which job is a device's head locks the device first.
///
/// Every statement is prepared once, whatever the chunk's size: rows travel as one binary array per column and are
/// unnested on the server, so PostgreSQL neither parses nor plans SQL per batch (it did, with one `VALUES` tuple
/// per row, and that was most of its CPU per webhook).
extension PostgresStore {
    /// Jobs per chunk: the device locks and state reads of a chunk cover at most this many devices.
    static let enqueueChunk = 256

    static let headStates = "('available', 'running', 'retryable')"

    /// Locks the rows of `devices` (sorted, so concurrent transactions lock in one order) and returns those that
    /// exist with their live jobs. The count is the committed one even when this waited for another writer's lock:
    /// under READ COMMITTED a row locked `FOR NO KEY UPDATE` is returned as its newest version, not as the
    /// statement's snapshot saw it (https://www.postgresql.org/docs/15/transaction-iso.html#XACT-READ-COMMITTED).
    @discardableResult
    static func lockDevices(_ devices: some Collection<String>, _ db: PGConnection) throws -> [String: Int] {
        guard !devices.isEmpty else { return [:] }
        let rows = try db.rows(
            "SELECT id, live_jobs FROM devices WHERE id = ANY($1::text[]) ORDER BY id FOR NO KEY UPDATE",
            [.texts(Set(devices))]
        ) { ($0.text(0), $0.int(1)) }
        return Dictionary(rows, uniquingKeysWith: { first, _ in first })
    }

    /// Two: while one batch's commit waits for the server's disk, the next executes (`writeEnqueue`).
    public var concurrentEnqueues: Int { 2 }

    public func enqueue(_ jobs: some Sequence<NewJob>, now: Int64, ttl: Duration, deviceCap: Int) throws(StoreError) -> [EnqueueResult] {
        let context = EnqueueContext(
            now: now, expiresAt: now + ttl.wholeMilliseconds,
            badgeSince: now - options.monitorRetention.wholeMilliseconds, deviceCap: deviceCap)
        // Kept as an array, so a transaction PostgreSQL aborts to break a deadlock can run again with the same jobs.
        let batch = Array(jobs)
        let results: [EnqueueResult] = try writeEnqueue { db in
            // A batch of several chunks locks all its devices first, in one sorted statement (as a single chunk and
            // `finish` do): chunk by chunk it would lock in an order of its own, and two transactions holding devices
            // the other wants (another ingest process, or `finish` in this one) would wait for each other until
            // PostgreSQL broke the deadlock (1 s).
            if batch.count > Self.enqueueChunk { try Self.lockDevices(batch.map(\.deviceID), db) }
            var results: [EnqueueResult] = []
            var start = 0
            while start < batch.count {
                let chunk = batch[start..<min(batch.count, start + Self.enqueueChunk)]
                results += try Self.enqueue(chunk, context, db)
                start += chunk.count
            }
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
        let liveJobs = try lockDevices(chunk.map(\.deviceID), db)
        let existing = Set(liveJobs.keys)
        var devices = try readState(of: liveJobs, chunk: chunk, context, db)

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
        // NOTIFY is delivered at commit, once per transaction however many chunks asked for it.
        let notify = results.contains { $0 != .deviceGone }
        try write(monitorStates, rows, notify: notify, context, db)
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

    /// Head and down monitors of every device in the chunk (one statement), and its newest waiting job when the
    /// cap may be reached. Run after the lock: each statement's snapshot then includes every committed change.
    private static func readState(
        of liveJobs: [String: Int], chunk: ArraySlice<NewJob>, _ context: EnqueueContext,
        _ db: PGConnection
    ) throws -> [String: DeviceState] {
        var devices: [String: DeviceState] = [:]
        for (device, live) in liveJobs { devices[device] = DeviceState(live: live) }
        guard !liveJobs.isEmpty else { return devices }
        let ids = PGValue.texts(liveJobs.keys)
        // Every job's badge counts the device's down monitors, so they are read for every chunk.
        for (isHead, device, monitor) in try db.rows(
            """
            SELECT true, device_id, NULL FROM jobs WHERE device_id = ANY($1::text[]) AND state IN \(headStates)
            UNION ALL
            SELECT false, device_id, monitor FROM monitor_states
            WHERE device_id = ANY($1::text[]) AND down AND updated_at >= $2::bigint
            """, [ids, .integer(context.badgeSince)], { ($0.bool(0), $0.text(1), $0.optionalText(2)) })
        {
            if isHead {
                devices[device]?.hasHead = true
            } else if let monitor {
                devices[device]?.downMonitors.insert(monitor)
            }
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

    /// One statement for the chunk's writes: the monitor states, the jobs and the deliverers' wake-up (NOTIFY on
    /// commit), so a group commit costs one round trip for them. Ids are drawn in row order (the ordinality),
    /// which is acceptance order. The two inserts touch different tables, so running them as sibling
    /// data-modifying CTEs (same snapshot, unordered between themselves) changes nothing either would see.
    private static func write(
        _ states: [MonitorKey: Bool], _ rows: [Row], notify: Bool, _ context: EnqueueContext, _ db: PGConnection
    ) throws {
        guard !states.isEmpty || !rows.isEmpty || notify else { return }
        let entries = Array(states)
        _ = try db.rows(
            """
            WITH monitors AS (
                INSERT INTO monitor_states (device_id, monitor, down, updated_at)
                SELECT device_id, monitor, down, $1::bigint FROM unnest($3::text[], $4::text[], $5::boolean[]) AS s (device_id, monitor, down)
                ON CONFLICT (device_id, monitor) DO UPDATE SET down = excluded.down, updated_at = excluded.updated_at
            ), queued AS (
                INSERT INTO jobs (public_id, device_id, state, payload, created_at, scheduled_at, expires_at, reports_outcome,
                                  badge, folded, folded_count)
                SELECT public_id, device_id, state, payload, $1::bigint, $1::bigint, $2::bigint, reports_outcome,
                       badge, folded, folded_count
                FROM unnest($6::text[], $7::text[], $8::text[], $9::bytea[], $10::boolean[], $11::integer[], $12::bytea[], $13::integer[])
                     WITH ORDINALITY AS r (public_id, device_id, state, payload, reports_outcome, badge, folded, folded_count, n)
                ORDER BY n
            )
            SELECT pg_notify('\(PostgresListener.channel)', '') WHERE $14::boolean
            """,
            [
                .integer(context.now), .integer(context.expiresAt),
                .texts(entries.map(\.key.device)), .texts(entries.map(\.key.monitor)), .booleans(entries.map(\.value)),
                .texts(rows.map(\.job.publicID)), .texts(rows.map(\.job.deviceID)), .texts(rows.map(\.state)),
                .byteArrays(rows.map(\.job.payload)), .booleans(rows.map(\.job.reportsOutcome)), .integers(rows.map(\.badge)),
                .byteArrays(rows.map { $0.folded.isEmpty ? nil : $0.folded.encoded }), .integers(rows.map(\.folded.count)),
                .boolean(notify)
            ]
        ) { _ in () }
    }
}
