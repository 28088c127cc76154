import Common
import SQLiteDriver

/// `finish` on SQLite: read what `FinishPlan` needs, let it decide, apply its writes row by row. All of it in the
/// single writer's transaction, so nothing moves between the read and the writes, and the writes need no guard.
extension SQLiteStore {
    public func finish(_ outcomes: [JobOutcome], worker: String, now: Int64) throws(StoreError) -> [Bool] {
        guard !outcomes.isEmpty else { return [] }
        return try write { db in try Self.finish(outcomes, worker: worker, now: now, db) }
    }

    /// `finish`'s reads and writes, inside the caller's transaction.
    static func finish(_ outcomes: [JobOutcome], worker: String, now: Int64, _ db: SQLiteConnection) throws -> [Bool] {
        let held = try heldJobs(outcomes.map(\.jobID), worker: worker, db)
        var tokens: [String: String] = [:]
        for device in FinishPlan.devicesToReadTokensOf(outcomes) {
            tokens[device] = try db.statement("SELECT device_token FROM devices WHERE id = ?").rows([.text(device)]) { $0.text(0) }
                .first
        }
        let plan = FinishPlan.plan(outcomes, FinishPlan.State(held: held.attempts, tokens: tokens), now: now)
        try apply(plan, numbers: held.numbers, now: now, db)
        return plan.applied
    }

    /// The jobs of `ids` this worker holds: their attempt, and their number in their device's queue (where the
    /// promotion looks for the next job, SQLiteStore+DeviceJobs.swift). One statement per 512 outcomes, the list
    /// padded to a power of two (`inLists`): a read per outcome would have been a statement per delivered push on
    /// top of its delete, and reading the number here keeps it out of the shared model.
    private static func heldJobs(_ ids: [Int64], worker: String, _ db: SQLiteConnection) throws -> (
        attempts: [Int64: Int], numbers: [Int64: Int64]
    ) {
        var held: (attempts: [Int64: Int], numbers: [Int64: Int64]) = ([:], [:])
        held.attempts.reserveCapacity(ids.count)
        held.numbers.reserveCapacity(ids.count)
        for (placeholders, values) in inLists(ids.map { .integer($0) }) {
            let rows = try db.statement(
                "SELECT id, attempt, device_seq FROM jobs WHERE \(LeaseGuard.condition(worker: "?1", attempt: nil)) AND id IN (\(placeholders))"
            ).rows([.text(worker)] + values) { ($0.int64(0), $0.int(1), $0.int64(2)) }
            for (id, attempt, number) in rows {
                held.attempts[id] = attempt
                held.numbers[id] = number
            }
        }
        return held
    }

    /// Deletes a delivered head.
    static let deleteJob = "DELETE FROM jobs WHERE id = ?"
    /// Makes a held job retryable at ?2, remembering the error ?3.
    static let retryJob = """
        UPDATE jobs SET state = 'retryable', scheduled_at = ?2, last_error = ?3, attempted_by = NULL, lease_expires_at = NULL
        WHERE id = ?1
        """
    /// Dead-letters a held job at ?2 with the reason ?3.
    static let discardJob = """
        UPDATE jobs SET state = 'discarded', finalized_at = ?2, last_error = ?3, attempted_by = NULL, lease_expires_at = NULL
        WHERE id = ?1
        """
    /// Gives a held job back unsent, due at ?2, its attempt not counted.
    static let giveBack = """
        UPDATE jobs SET state = 'available', scheduled_at = ?2, attempt = max(attempt - 1, 0), attempted_by = NULL,
                        lease_expires_at = NULL
        WHERE id = ?1
        """

    /// The plan's writes, in its order (`FinishPlan`). `numbers`: the held jobs' numbers in their device's queue.
    private static func apply(_ plan: FinishPlan, numbers: [Int64: Int64], now: Int64, _ db: SQLiteConnection) throws {
        // A delivered push is this delete and its device's promotion; the device's update is one per batch.
        let delete = try db.statement(deleteJob)
        for id in plan.deletes { try delete.run([.integer(id)]) }
        for retry in plan.retries { try db.statement(retryJob).run([.integer(retry.jobID), .integer(retry.at), .text(retry.error)]) }
        for discard in plan.discards { try db.statement(discardJob).run([.integer(discard.jobID), .integer(now), .text(discard.reason)]) }
        for back in plan.giveBacks { try db.statement(giveBack).run([.integer(back.jobID), .integer(back.until)]) }
        for report in plan.reports {
            try db.statement("INSERT OR REPLACE INTO job_outcomes (public_id, outcome, reason, finished_at) VALUES (?, ?, ?, ?)")
                .run([.text(report.publicID), .text(report.kind.rawValue), .text(report.reason), .integer(now)])
        }
        for settlement in plan.settlements { try settle(settlement, now: now, db) }
        // A device's last success is the same `now` for every job of the batch: one update per device.
        let success = try db.statement(
            """
            UPDATE devices SET live_jobs = live_jobs - ?3, last_successful_notification = ?1, last_delivery_error = '',
                               \(DeviceBurst.recordPush(now: "?1"))
            WHERE id = ?2
            """)
        for (device, heads) in plan.successes { try success.run([.integer(now), .text(device), .integer(Int64(heads))]) }
        for error in plan.deviceErrors {
            try db.statement("UPDATE devices SET last_delivery_error = ?1, live_jobs = live_jobs - ?3 WHERE id = ?2")
                .run([.text(error.reason), .text(error.device), .integer(Int64(error.heads))])
        }
        for promotion in plan.promotions {
            guard let number = numbers[promotion.afterJob] else { continue }
            try promoteNext(device: promotion.device, after: number, db)
        }
        for removal in plan.removals {
            _ = try DeviceDeletion.unregistered(reason: removal.reason, at: now).apply(to: removal.device, in: SQLiteDeviceDeletion(db: db))
        }
    }

    /// A `FinishPlan.Settlement`: each merged job only if still pending on that device with the folded alerts the
    /// digest carried, and what it settled taken off the device's live jobs.
    private static func settle(_ settlement: FinishPlan.Settlement, now: Int64, _ db: SQLiteConnection) throws {
        let fence = "id = ? AND device_id = ? AND state = 'pending' AND folded_count = ?"
        let statement = try db.statement(
            settlement.deadLetterReason == nil
                ? "DELETE FROM jobs WHERE \(fence)"
                : "UPDATE jobs SET state = 'discarded', finalized_at = ?, last_error = ?, attempt = max(attempt, ?) WHERE \(fence)")
        // Bound, never pasted into the text: the connection keeps one prepared statement per distinct text.
        let reason: [SQLiteValue] =
            settlement.deadLetterReason.map { [.integer(now), .text($0), .integer(Int64(settlement.attempt))] } ?? []
        var settled = 0
        for job in settlement.jobs {
            settled += try statement.run(reason + [.integer(job.id), .text(settlement.device), .integer(Int64(job.foldedCount))])
        }
        guard settled > 0 else { return }
        try db.statement("UPDATE devices SET live_jobs = live_jobs - ?2 WHERE id = ?1").run([.text(settlement.device), .integer(Int64(settled))])
    }
}

extension SQLiteStore {
    /// One transaction: the promoted heads' pages, written by the finish and again by the claim that leases them,
    /// go to the WAL once. Not a savepoint around the claim: SQLite copies every page first changed under a
    /// savepoint into a statement journal, on every call, for a failure that is rare. When the claim or the commit
    /// fails after the finish's statements ran, the transaction rolls back and the finish runs again alone, so a failed
    /// claim still leaves the outcomes applied; a failure before that (the write lock, the finish) is the finish's.
    public func finishThenClaim(_ outcomes: [JobOutcome], worker: String, now: Int64, claimLimit: Int, lease: Duration) throws(StoreError)
        -> FinishedThenClaimed
    {
        var finished = false
        do {
            return try write { db in
                let started = ContinuousClock.now
                let applied = outcomes.isEmpty ? [] : try Self.finish(outcomes, worker: worker, now: now, db)
                let finishTime = ContinuousClock.now - started
                finished = true
                let claimed = claimLimit > 0 ? try Self.claim(worker: worker, limit: claimLimit, now: now, lease: lease, db) : []
                return FinishedThenClaimed(applied: applied, claimed: .success(claimed), finishTime: finishTime)
            }
        } catch  where finished {
            let started = ContinuousClock.now
            let applied = try finish(outcomes, worker: worker, now: now)
            return FinishedThenClaimed(applied: applied, claimed: .failure(error), finishTime: ContinuousClock.now - started)
        }
    }
}
