import Common
import SQLiteDriver

/// A device's jobs, found by their number in its queue (migration 12).
///
/// Each job carries `device_seq`, its place in its device's acceptance order, and `devices.next_seq` is the number
/// the device's next job gets. Jobs are found through `jobs_by_device_seq (device_seq, device_id)`, not through an
/// index ordered by device. Why: completing a head deletes its index entry, and with the index ordered by device
/// every device's head sat in a leaf page of its own, so a batch of a thousand completions at depth wrote a
/// thousand pages; ordered by number, the heads of devices that move in step share a few (docs/performance.md).
///
/// What makes walking by number cheap: a device's live jobs are its head and the jobs pending behind it, numbered
/// from the head's number up to `next_seq` in acceptance order. A number in that range is missing, or held by a
/// dead letter, only where a job merged into a digest was settled with its head (up to `maximumMerged` of them);
/// other dead letters hold numbers below the head's. A device without a head has no live job: every live job waits
/// behind its head.
extension SQLiteStore {
    /// The number of the device's head (nil without one) and the number its next job gets; nil when the device is gone.
    static func jobNumbers(device: String, _ db: SQLiteConnection) throws -> (head: Int64?, next: Int64)? {
        try db.statement(
            """
            SELECT d.next_seq, (SELECT h.device_seq FROM jobs h WHERE h.device_id = d.id AND \(isHead("h")))
            FROM devices d WHERE d.id = ?
            """
        ).rows([.text(device)]) { ($0.optionalInt64(1), $0.int64(0)) }.first.map { (head: $0.0, next: $0.1) }
    }

    /// Makes the device's (?2) job numbered ?1 its head, if that job is waiting.
    static let promoteNumbered = "UPDATE jobs SET state = 'available' WHERE device_seq = ?1 AND device_id = ?2 AND state = 'pending'"

    /// After the head numbered `seq` left (delivered, dead-lettered), makes the device's oldest pending job its head.
    static func promoteNext(device: String, after seq: Int64, _ db: SQLiteConnection) throws {
        let promote = try db.statement(promoteNumbered)
        // The usual case, and the one a backlog drains by: the next number waits. Otherwise walk on, past jobs
        // settled with a digest, up to the device's next number.
        if try promote.run([.integer(seq + 1), .text(device)]) == 1 { return }
        guard let next = try db.statement("SELECT next_seq FROM devices WHERE id = ?").rows([.text(device)], { $0.int64(0) }).first
        else { return }
        var candidate = seq + 2
        while candidate < next {
            if try promote.run([.integer(candidate), .text(device)]) == 1 { return }
            candidate += 1
        }
    }

    /// The device's (?2) job numbered ?1, if it is waiting.
    static let pendingJobNumbered = """
        SELECT id, payload, created_at, reports_outcome, folded, badge, expires_at FROM jobs
        WHERE device_seq = ?1 AND device_id = ?2 AND state = 'pending'
        """

    /// The device's pending jobs, oldest first, at most `limit`, each with its number.
    static func pendingJobs(device: String, limit: Int, _ db: SQLiteConnection) throws -> [(seq: Int64, job: PendingJob)] {
        guard limit > 0, let numbers = try jobNumbers(device: device, db), let head = numbers.head else { return [] }
        let job = try db.statement(pendingJobNumbered)
        var pending: [(seq: Int64, job: PendingJob)] = []
        var seq = head + 1
        while seq < numbers.next, pending.count < limit {
            pending += try job.rows([.integer(seq), .text(device)]) { [seq] in
                (
                    seq,
                    PendingJob(
                        id: $0.int64(0), payload: $0.blob(1), createdAt: $0.int64(2), reportsOutcome: $0.int(3) == 1,
                        folded: $0.isNull(4) ? FoldedAlerts() : FoldedAlerts(encoded: $0.blob(4)),
                        badge: $0.isNull(5) ? nil : $0.int(5), expiresAt: $0.int64(6))
                )
            }
            seq += 1
        }
        return pending
    }

    /// The device's (?2) job numbered ?1, if it is waiting and an alert may be folded into it.
    static let foldableJobNumbered = """
        SELECT id, folded FROM jobs
        WHERE device_seq = ?1 AND device_id = ?2 AND state = 'pending' AND reports_outcome = 0
        """

    /// The device's newest pending job that does not report its outcome (the one SPEC §2.4 folds an alert into):
    /// its id, number and folded alerts, or nil. Whether a digest sealed it is `EnqueuePlan`'s to judge.
    static func newestFoldableJob(device: String, _ db: SQLiteConnection) throws -> EnqueuePlan.StoredTail? {
        guard let numbers = try jobNumbers(device: device, db), let head = numbers.head else { return nil }
        let job = try db.statement(foldableJobNumbered)
        var seq = numbers.next - 1
        while seq > head {
            if let found = try job.rows(
                [.integer(seq), .text(device)],
                { [seq] in EnqueuePlan.StoredTail(id: $0.int64(0), position: seq, folded: FoldedAlerts(encoded: $0.isNull(1) ? [] : $0.blob(1))) }
            ).first {
                return found
            }
            seq -= 1
        }
        return nil
    }

    /// Deletes the device's (?2) job numbered ?1, whatever its state.
    static let deleteNumbered = "DELETE FROM jobs WHERE device_seq = ?1 AND device_id = ?2"

    /// Deletes the device's dead letters.
    static let deleteDeadLetters = "DELETE FROM jobs WHERE device_id = ?1 AND state = 'discarded'"
}

/// `DeviceDeletion`'s steps on SQLite, in the writer's transaction (which holds the whole database: no lock to take).
struct SQLiteDeviceDeletion: DeviceDeletionDialect {
    let db: SQLiteConnection

    func lockDevice(_ device: String) throws -> Bool {
        try !db.statement("SELECT 1 FROM devices WHERE id = ?").rows([.text(device)], { _ in true }).isEmpty
    }

    /// Through `jobs_waiting_tests` (migration 13), which holds only those jobs; `OR IGNORE` keeps an outcome
    /// already recorded.
    func reportWaitingTests(of device: String, _ outcome: ReportedOutcome, at: Int64) throws {
        try db.statement(
            """
            INSERT OR IGNORE INTO job_outcomes (public_id, outcome, reason, finished_at)
            SELECT public_id, ?2, ?3, ?4 FROM jobs WHERE device_id = ?1 AND reports_outcome = 1 AND state != 'discarded'
            """
        ).run([.text(device), .text(outcome.kind.rawValue), .text(outcome.reason), .integer(at)])
    }

    func recordTombstone(of device: String, reason: String, at: Int64) throws {
        try db.statement(
            """
            INSERT INTO tombstones (device_id, reason, removed_at) VALUES (?1, ?2, ?3)
            ON CONFLICT (device_id) DO UPDATE SET reason = excluded.reason, removed_at = excluded.removed_at
            """
        ).run([.text(device), .text(reason), .integer(at)])
    }

    /// What the foreign key's cascade did before migration 12: the live jobs by number from the head's, the dead
    /// letters through their partial index by device.
    func deleteDeviceAndJobs(_ device: String) throws -> Bool {
        if let numbers = try SQLiteStore.jobNumbers(device: device, db), let head = numbers.head {
            let delete = try db.statement(SQLiteStore.deleteNumbered)
            for seq in head..<max(head, numbers.next) { try delete.run([.integer(seq), .text(device)]) }
        }
        try db.statement(SQLiteStore.deleteDeadLetters).run([.text(device)])
        return try db.statement("DELETE FROM devices WHERE id = ?").run([.text(device)]) > 0
    }
}
