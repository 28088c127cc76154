import Common
import PostgresDriver

/// Enqueue on PostgreSQL: a batch in one transaction, written with a few multi-row statements per chunk.
///
/// One round trip per row would cost more than the rows themselves, so each chunk locks its devices, reads their
/// state in one statement (live jobs, head, down monitors; the waiting Test job and the newest waiting job only
/// where `EnqueuePlan.reads(for:)` asks), lets `EnqueuePlan` decide every job, as SQLite does, and writes the
/// outcome in one INSERT per table. The device locks make the read state the truth until commit: every writer that
/// changes which job is a device's head locks the device first. BEGIN and the lock travel with the read, the write
/// with the COMMIT: a webhook at a trickle is two round trips.
///
/// Every statement is prepared once, whatever the chunk's size: rows travel as one binary array per column and are
/// unnested on the server, so PostgreSQL neither parses nor plans SQL per batch (it did, with one `VALUES` tuple
/// per row, and that was most of its CPU per webhook).
extension PostgresStore {
    /// Jobs per chunk: the device locks and state reads of a chunk cover at most this many devices.
    static let enqueueChunk = 256

    static let headStates = "('available', 'running', 'retryable')"

    static func isHead(_ alias: String) -> String { "\(alias).state IN \(headStates)" }

    /// Locks the rows of `devices` (sorted, so concurrent transactions lock in one order), sent with the
    /// transaction's next statement (`PGConnection.runDeferred`). Under READ COMMITTED each statement sees what
    /// was committed before it started, so the statements after this one read the devices as the last holder of
    /// their locks left them (https://www.postgresql.org/docs/15/transaction-iso.html#XACT-READ-COMMITTED).
    ///
    /// One device, the common case at a trickle, has a statement of its own: PostgreSQL planned `id = ANY($1)` again
    /// on every call in some runs (its plan for a one-element array looked cheaper than the generic one), which
    /// took as long as executing it (pg_stat_statements, docs/performance.md). `id = $1` has one plan.
    static func lockDevices(_ devices: some Collection<String>, _ db: PGConnection) {
        let devices = Set(devices)
        if devices.count == 1, let device = devices.first {
            db.runDeferred("SELECT 1 FROM devices WHERE id = $1::text FOR NO KEY UPDATE", [.text(device)])
        } else if !devices.isEmpty {
            db.runDeferred("SELECT 1 FROM devices WHERE id = ANY($1::text[]) ORDER BY id FOR NO KEY UPDATE", [.texts(devices)])
        }
    }

    /// Two: while one batch's commit waits for the server's disk, the next executes (`writeEnqueue`).
    public var concurrentEnqueues: Int { 2 }

    public func enqueue(_ jobs: some Sequence<NewJob>, now: Int64, ttl: Duration, deviceCap: Int) throws(StoreError) -> [EnqueueResult] {
        let context = EnqueueContext(
            now: now, expiresAt: now + ttl.wholeMilliseconds,
            badgeSince: now - options.monitorRetention.wholeMilliseconds,
            freshSince: now - EnqueuePlan.monitorRefresh(retention: options.monitorRetention).wholeMilliseconds, deviceCap: deviceCap)
        // Kept as an array, so a transaction PostgreSQL aborts to break a deadlock can run again with the same jobs.
        let batch = Array(jobs)
        let results: [EnqueueResult] = try writeEnqueue { db in
            // A batch of several chunks locks all its devices first, in one sorted statement (as a single chunk and
            // `finish` do): chunk by chunk it would lock in an order of its own, and two transactions holding devices
            // the other wants (another ingest process, or `finish` in this one) would wait for each other until
            // PostgreSQL broke the deadlock (1 s).
            if batch.count > Self.enqueueChunk { Self.lockDevices(batch.map(\.deviceID), db) }
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
        /// A monitor's row written since then is fresh (`EnqueuePlan.monitorRefresh`).
        let freshSince: Int64
        let deviceCap: Int
    }

    private static func enqueue(_ chunk: ArraySlice<NewJob>, _ context: EnqueueContext, _ db: PGConnection) throws -> [EnqueueResult] {
        let ids = Set(chunk.map(\.deviceID))
        lockDevices(ids, db)
        let plan = EnqueuePlan.plan(chunk, devices: try readState(of: ids, chunk: chunk, context, db), cap: context.deviceCap)
        // NOTIFY is delivered at commit, once per transaction however many chunks asked for it.
        write(plan, notify: plan.results.contains { $0 != .deviceGone }, context, db)
        for fold in plan.tailFolds {
            db.runDeferred(
                """
                UPDATE jobs SET folded = $1::bytea, folded_count = $2::integer, badge = $3::integer,
                                expires_at = greatest(expires_at, $5::bigint)
                WHERE id = $4::bigint
                """,
                [
                    .bytes(fold.folded.encoded), .integer(Int64(fold.folded.count)), .integer(Int64(fold.badge)), .integer(fold.id),
                    .integer(context.expiresAt)
                ])
        }
        for (device, badge) in plan.testBadges {
            // Through `jobs_waiting_tests`: the partial index's condition.
            db.runDeferred(
                "UPDATE jobs SET badge = $1::integer WHERE device_id = $2 AND reports_outcome AND state <> 'discarded'",
                [.integer(Int64(badge)), .text(device)])
        }
        return plan.results
    }

    /// The chunk's devices that exist, with their live jobs, heads and down monitors (each row's freshness in the
    /// fourth column; one statement), and the waiting Test jobs and tails `EnqueuePlan.reads(for:)` asks for. Run
    /// after the lock (`lockDevices`): each statement's snapshot then includes every committed change to these devices.
    private static func readState(
        of ids: Set<String>, chunk: ArraySlice<NewJob>, _ context: EnqueueContext, _ db: PGConnection
    ) throws -> [String: EnqueuePlan.DeviceState] {
        // One device (a trickle) is matched with `= $1`, several with `= ANY($1)`: two statements, each with one
        // plan (see `lockDevices`; the `ANY` form alone was, in some runs, planned again on every call).
        let single = ids.count == 1 ? ids.first : nil
        let match = single == nil ? "= ANY($1::text[])" : "= $1::text"
        // Every job's badge counts the device's down monitors, so they are read for every chunk.
        let rows = try db.rows(
            """
            SELECT 'device', id, NULL, live_jobs, digest_sealed_through FROM devices WHERE id \(match)
            UNION ALL
            SELECT 'head', device_id, NULL, 0, 0 FROM jobs WHERE device_id \(match) AND state IN \(headStates)
            UNION ALL
            SELECT 'down', device_id, monitor, (updated_at >= $3::bigint)::integer, 0 FROM monitor_states
            WHERE device_id \(match) AND down AND updated_at >= $2::bigint
            """, [single.map { .text($0) } ?? .texts(ids), .integer(context.badgeSince), .integer(context.freshSince)],
            // `number`: the live count ('device'), 1 when the monitor's row is fresh ('down').
            { (kind: $0.text(0), device: $0.text(1), monitor: $0.optionalText(2), number: $0.int(3), sealed: $0.int64(4)) })
        var devices: [String: EnqueuePlan.DeviceState] = [:]
        for row in rows where row.kind == "device" {
            devices[row.device] = .init(storedLive: row.number, hasHead: false, sealedThrough: row.sealed)
        }
        for row in rows {
            switch row.kind {
            case "head": devices[row.device]?.hasHead = true
            case "down":
                guard let monitor = row.monitor else { break }
                devices[row.device]?.downMonitors.insert(monitor)
                if row.number == 1 { devices[row.device]?.freshDownMonitors.insert(monitor) }
            default: break
            }
        }
        let reads = EnqueuePlan.reads(for: chunk, devices: devices, cap: context.deviceCap)
        if !reads.waitingTests.isEmpty {
            // Through jobs_waiting_tests (migration 13): only the few live jobs Test requests wait on.
            for (device, publicID, payload) in try db.rows(
                """
                SELECT device_id, public_id, payload FROM jobs
                WHERE device_id = ANY($1::text[]) AND reports_outcome AND state <> 'discarded'
                """, [.texts(reads.waitingTests)], { ($0.text(0), $0.text(1), $0.bytes(2)) })
            {
                devices[device]?.waitingTest = EnqueuePlan.WaitingTest(publicID: publicID, payload: payload)
            }
        }
        if !reads.tails.isEmpty {
            // The newest waiting alert of each device, sealed or not: that is `EnqueuePlan`'s to judge.
            for (device, id, folded) in try db.rows(
                """
                SELECT DISTINCT ON (device_id) device_id, id, folded FROM jobs
                WHERE device_id = ANY($1::text[]) AND state = 'pending' AND NOT reports_outcome
                ORDER BY device_id, id DESC
                """, [.texts(reads.tails)], { ($0.text(0), $0.int64(1), $0.isNull(2) ? FoldedAlerts() : FoldedAlerts(encoded: $0.bytes(2))) })
            {
                devices[device]?.tail = EnqueuePlan.StoredTail(id: id, folded: folded)
            }
        }
        return devices
    }

    /// One statement for the chunk's writes: the monitor states, the jobs, the devices' live counts and the
    /// deliverers' wake-up (NOTIFY on commit), sent with the COMMIT or the next chunk's reads (`runDeferred`): no
    /// round trip of its own. Ids are drawn in row order (the ordinality), which is acceptance order. The three
    /// writes touch different tables, so running them as sibling data-modifying CTEs (same snapshot, unordered
    /// between themselves) changes nothing either would see; the inserts' foreign-key checks run after the
    /// statement and find the device rows as it left them.
    private static func write(_ plan: EnqueuePlan.Batch, notify: Bool, _ context: EnqueueContext, _ db: PGConnection) {
        let (states, rows, liveJobs) = (plan.monitorStates, plan.rows, plan.liveCounts)
        guard !states.isEmpty || !rows.isEmpty || !liveJobs.isEmpty || notify else { return }
        db.runDeferred(
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
            ), counted AS (
                UPDATE devices SET live_jobs = c.live FROM unnest($15::text[], $16::integer[]) AS c (id, live)
                WHERE devices.id = c.id
            )
            SELECT pg_notify('\(PostgresListener.channel)', '') WHERE $14::boolean
            """,
            [
                .integer(context.now), .integer(context.expiresAt),
                .texts(states.map(\.device)), .texts(states.map(\.monitor)), .booleans(states.map(\.down)),
                .texts(rows.map(\.job.publicID)), .texts(rows.map(\.job.deviceID)), .texts(rows.map { $0.isHead ? "available" : "pending" }),
                .byteArrays(rows.map(\.job.payload)), .booleans(rows.map(\.waits)), .integers(rows.map(\.badge)),
                .byteArrays(rows.map { $0.folded.isEmpty ? nil : $0.folded.encoded }), .integers(rows.map(\.folded.count)),
                .boolean(notify), .texts(liveJobs.keys), .integers(liveJobs.values)
            ])
    }
}
