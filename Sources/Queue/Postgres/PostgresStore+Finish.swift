import Common
import PostgresDriver

/// `finish` on PostgreSQL: lock the outcomes' devices, then read and lock the jobs this worker still holds (one
/// round trip), let `FinishPlan` decide, and send its writes as set-wise statements with the COMMIT: two round
/// trips a batch, whatever its outcomes.
///
/// Under READ COMMITTED the read is the truth until commit: the devices are locked as enqueue and replay lock
/// them (which job is a device's head changes only under its lock, and so does its token), and the held jobs are
/// locked `FOR UPDATE`, so no claim, release or rescue moves them (those skip locked rows) between the read and the
/// writes, which therefore need no lease guard of their own.
extension PostgresStore {
    public func finish(_ outcomes: [JobOutcome], worker: String, now: Int64) throws(StoreError) -> [Bool] {
        guard !outcomes.isEmpty else { return [] }
        return try write { db in
            // A job's device never changes, so the claim's answer names the devices to lock (no read of the jobs).
            Self.lockDevices(Set(outcomes.map(\.deviceID)), db)
            let plan = FinishPlan.plan(outcomes, try Self.finishState(outcomes, worker: worker, db), now: now)
            try Self.apply(plan, now: now, db)
            Self.notifyDeliverers(db)
            return plan.applied
        }
    }

    /// The outcomes' jobs this worker holds, locked, with the current token of the devices of `removeDevice`
    /// outcomes among them (a device gone has none).
    private static func finishState(_ outcomes: [JobOutcome], worker: String, _ db: PGConnection) throws -> FinishPlan.State {
        let rows = try db.rows(
            """
            SELECT j.id, j.attempt, j.device_id, d.device_token
            FROM unnest($1::bigint[]) AS o (id)
            JOIN jobs j ON j.id = o.id
            LEFT JOIN devices d ON d.id = j.device_id AND d.id = ANY($3::text[])
            WHERE \(LeaseGuard.condition(worker: "$2::text", attempt: nil, table: "j"))
            FOR UPDATE OF j
            """, [.bigints(outcomes.map(\.jobID)), .text(worker), .texts(FinishPlan.devicesToReadTokensOf(outcomes))]
        ) { (id: $0.int64(0), attempt: $0.int(1), device: $0.text(2), token: $0.optionalText(3)) }
        var state = FinishPlan.State(held: [:])
        for row in rows {
            state.held[row.id] = row.attempt
            if let token = row.token { state.tokens[row.device] = token }
        }
        return state
    }

    /// The plan's writes, in its order (`FinishPlan`), each kind one statement for the batch, sent with the COMMIT.
    private static func apply(_ plan: FinishPlan, now: Int64, _ db: PGConnection) throws {
        if !plan.deletes.isEmpty {
            db.runDeferred("DELETE FROM jobs USING unnest($1::bigint[]) AS o (id) WHERE jobs.id = o.id", [.bigints(plan.deletes)])
        }
        if !plan.retries.isEmpty {
            db.runDeferred(
                """
                UPDATE jobs SET state = 'retryable', scheduled_at = r.at, last_error = r.error, attempted_by = NULL,
                                lease_expires_at = NULL
                FROM unnest($1::bigint[], $2::bigint[], $3::text[]) AS r (id, at, error) WHERE jobs.id = r.id
                """, [.bigints(plan.retries.map(\.jobID)), .bigints(plan.retries.map(\.at)), .texts(plan.retries.map(\.error))])
        }
        if !plan.discards.isEmpty {
            db.runDeferred(
                """
                UPDATE jobs SET state = 'discarded', finalized_at = $1::bigint, last_error = r.reason, attempted_by = NULL,
                                lease_expires_at = NULL
                FROM unnest($2::bigint[], $3::text[]) AS r (id, reason) WHERE jobs.id = r.id
                """, [.integer(now), .bigints(plan.discards.map(\.jobID)), .texts(plan.discards.map(\.reason))])
        }
        if !plan.giveBacks.isEmpty {
            db.runDeferred(
                """
                UPDATE jobs SET state = 'available', scheduled_at = g.until, attempt = greatest(attempt - 1, 0),
                                attempted_by = NULL, lease_expires_at = NULL
                FROM unnest($1::bigint[], $2::bigint[]) AS g (id, until) WHERE jobs.id = g.id
                """, [.bigints(plan.giveBacks.map(\.jobID)), .bigints(plan.giveBacks.map(\.until))])
        }
        if !plan.reports.isEmpty {
            db.runDeferred(
                """
                INSERT INTO job_outcomes (public_id, outcome, reason, finished_at)
                SELECT public_id, outcome, reason, $4::bigint FROM unnest($1::text[], $2::text[], $3::text[]) AS r (public_id, outcome, reason)
                ON CONFLICT (public_id) DO UPDATE SET outcome = excluded.outcome, reason = excluded.reason,
                                                      finished_at = excluded.finished_at
                """,
                [
                    .texts(plan.reports.map(\.publicID)), .texts(plan.reports.map(\.kind.rawValue)), .texts(plan.reports.map(\.reason)),
                    .integer(now)
                ])
        }
        settle(plan.settlements.filter { $0.deadLetterReason == nil }, now: now, db)
        settle(plan.settlements.filter { $0.deadLetterReason != nil }, now: now, db)
        updateDevices(plan, now: now, db)
        promote(Set(plan.promotions.map(\.device)), db)
        for removal in plan.removals {
            _ = try DeviceDeletion.unregistered(reason: removal.reason, at: now)
                .apply(to: removal.device, in: PostgresDeviceDeletion(db: db, withTheCommit: true))
        }
    }

    /// `FinishPlan.Settlement`s that all delete, or all dead-letter (each with its own reason), in one statement
    /// that also takes what it settled off the devices' live jobs.
    private static func settle(_ settlements: [FinishPlan.Settlement], now: Int64, _ db: PGConnection) {
        let merged = settlements.flatMap { settlement in settlement.jobs.map { (settlement, $0) } }
        guard !merged.isEmpty else { return }
        let rows =
            "unnest($1::bigint[], $2::text[], $3::integer[], $4::text[], $5::integer[]) AS m (id, device_id, folded_count, reason, attempt)"
        let settle =
            settlements.first?.deadLetterReason == nil
            ? "DELETE FROM jobs USING \(rows)"
            : """
            UPDATE jobs SET state = 'discarded', finalized_at = $6::bigint, last_error = m.reason,
                            attempt = greatest(jobs.attempt, m.attempt) FROM \(rows)
            """
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
            """,
            [
                .bigints(merged.map(\.1.id)), .texts(merged.map(\.0.device)), .integers(merged.map(\.1.foldedCount)),
                .texts(merged.map { $0.0.deadLetterReason ?? "" }), .integers(merged.map(\.0.attempt))
            ] + (settlements.first?.deadLetterReason == nil ? [] : [.integer(now)]))
    }

    /// The devices' success (one `now` for the batch) and error updates, each lowering their live jobs by the heads
    /// that left.
    private static func updateDevices(_ plan: FinishPlan, now: Int64, _ db: PGConnection) {
        if !plan.successes.isEmpty {
            db.runDeferred(
                """
                UPDATE devices SET last_successful_notification = $1::bigint, last_delivery_error = '',
                                   live_jobs = live_jobs - c.delivered, \(DeviceBurst.recordPush(now: "$1::bigint"))
                FROM unnest($2::text[], $3::integer[]) AS c (id, delivered)
                WHERE devices.id = c.id
                """, [.integer(now), .texts(plan.successes.keys), .integers(plan.successes.values)])
        }
        if !plan.deviceErrors.isEmpty {
            db.runDeferred(
                """
                UPDATE devices SET last_delivery_error = e.reason, live_jobs = live_jobs - e.heads
                FROM unnest($1::text[], $2::text[], $3::integer[]) AS e (id, reason, heads)
                WHERE devices.id = e.id
                """,
                [.texts(plan.deviceErrors.map(\.device)), .texts(plan.deviceErrors.map(\.reason)), .integers(plan.deviceErrors.map(\.heads))])
        }
    }

    /// Promotes the next job of each of `devices`.
    private static func promote(_ devices: Set<String>, _ db: PGConnection) {
        if devices.count == 1, let device = devices.first {
            // One device (a trickle) in a statement of its own, planned once (see `lockDevices`).
            db.runDeferred(promoteNext, [.text(device)])
        } else if !devices.isEmpty {
            // Statements without parameters are the settings: sent unprepared, as no plan of them is worth keeping.
            for (sql, values) in promotion(of: devices) { db.runDeferred(sql, values, prepare: !values.isEmpty) }
        }
    }
}
