import Common
import Foundation
import TestSupport
import Testing

@testable import Queue

/// SQLite finds a device's jobs by their number in its queue (migration 12, SQLiteStore+DeviceJobs.swift), not
/// through an index ordered by device, and without a foreign key: what the key's cascade did is done by hand.
@Suite struct DeviceJobNumbersTests {
    let t0 = TestDatabase.t0

    private func numbers(_ db: TestDatabase, _ device: String) throws -> [[String]] {
        try db.kind.rawQuery(db.location, "SELECT device_seq, state FROM jobs WHERE device_id = '\(device)' ORDER BY id")
    }

    /// Each device counts its own jobs in acceptance order, however the devices' alerts interleave; a replayed dead
    /// letter is numbered again, behind what its device already has.
    @Test func eachDeviceNumbersItsJobsInAcceptanceOrder() throws {
        let db = try TestDatabase()
        let a = try db.device(1)
        let b = try db.device(2)
        try db.enqueue(a, "a0")
        try db.enqueue(b, "b0")
        try db.enqueue(a, "a1", "a2")
        #expect(try numbers(db, a) == [["0", "available"], ["1", "pending"], ["2", "pending"]])
        #expect(try numbers(db, b) == [["0", "available"]])

        let a0 = try #require(try db.claim().first { $0.deviceID == a })
        _ = try db.store.finish([.dead(a0, "BadDeviceToken")], worker: "w1", now: t0)
        #expect(try db.store.replayDeadLetters(DeadLetterFilter(deviceID: a), limit: 10, now: t0, ttl: .seconds(60)) == 1)
        #expect(try numbers(db, a) == [["1", "available"], ["2", "pending"], ["3", "pending"]])
        #expect(try db.kind.rawQuery(db.location, "SELECT next_seq FROM devices WHERE id = '\(a)'") == [["4"]])
    }

    /// The store's writer fires no trigger and numbers and counts its jobs itself (`SQLiteStore.init`); an ingest of
    /// v0.1.0 (schema 12) running beside it through a rolling upgrade inserts its jobs with its own statement and relies
    /// on `jobs_live_on_insert`. Jobs written both ways to one device share one numbering and one count.
    @Test func jobsTheTriggerCountsAndJobsTheWriterCountsShareOneNumberingAndCount() throws {
        let db = try TestDatabase()
        let a = try db.device(1)
        try db.enqueue(a, "a0")
        // v0.1.0's insert (its `insertJob`, at a3fd44f), with the number it read from the device, on a connection that
        // fires the trigger as that release's do.
        try db.kind.rawQuery(
            db.location,
            """
            INSERT INTO jobs (public_id, device_id, state, payload, created_at, scheduled_at, expires_at, reports_outcome, badge,
                              device_seq)
            SELECT 'v010', id, 'pending', X'6131', \(t0), \(t0), \(t0 + 60_000), 0, 0, next_seq FROM devices WHERE id = '\(a)'
            """)
        try db.enqueue(a, "a2", "a3")
        #expect(try numbers(db, a) == [["0", "available"], ["1", "pending"], ["2", "pending"], ["3", "pending"]])
        #expect(try db.kind.rawQuery(db.location, "SELECT live_jobs, next_seq FROM devices WHERE id = '\(a)'") == [["4", "4"]])
        #expect(try db.kind.rawQuery(db.location, "SELECT count(*) FROM sqlite_master WHERE type = 'trigger'") == [["1"]])
    }

    /// A head whose next numbers were settled with a digest hands over to the first job still waiting, and the
    /// device's waiting jobs are listed past the gap in order.
    @Test func theNextHeadIsFoundPastNumbersSettledWithADigest() throws {
        let db = try TestDatabase()
        let a = try db.device(1)
        try db.enqueue(a, "a0", "a1", "a2", "a3", "a4", "a5")
        let head = try #require(try db.claim().first)
        let merged = try db.store.pendingJobs(deviceID: a, limit: 3)
        #expect(merged.map { String(decoding: $0.payload, as: UTF8.self) } == ["a1", "a2", "a3"])
        _ = try db.store.finish([JobOutcome(head, kind: .delivered, merged: merged.map(\.asMerged))], worker: "w1", now: t0)
        #expect(try db.store.pendingJobs(deviceID: a, limit: 10).map { String(decoding: $0.payload, as: UTF8.self) } == ["a5"])
        let next = try #require(try db.claim().first)
        #expect(next.label == "a4")
        // The last job: nothing waits behind it, and the walk stops at the device's next number.
        _ = try db.store.finish([.delivered(next)], worker: "w1", now: t0)
        #expect(try db.claim().map(\.label) == ["a5"])
    }

    /// A head whose digest settled every job behind it leaves its device with nothing waiting: the walk for the next
    /// head runs out at the device's next number, and the next alert becomes the head at once.
    @Test func aDigestThatSettledEveryWaitingJobLeavesNoHeadBehind() throws {
        let db = try TestDatabase()
        let a = try db.device(1)
        try db.enqueue(a, "a0", "a1", "a2")
        let head = try #require(try db.claim().first)
        let merged = try db.store.pendingJobs(deviceID: a, limit: 10)
        #expect(merged.count == 2)
        _ = try db.store.finish([JobOutcome(head, kind: .delivered, merged: merged.map(\.asMerged))], worker: "w1", now: t0)
        #expect(try numbers(db, a).isEmpty)
        try db.enqueue(a, "a3")
        #expect(try numbers(db, a) == [["3", "available"]])
        #expect(try db.claim().map(\.label) == ["a3"])
    }

    /// The upgrade numbers each device's jobs on their own, in acceptance (id) order however the devices' jobs
    /// interleave, dead letters included, and gives every device the number its next job gets.
    @Test func theUpgradeNumbersEachDevicesJobsSeparately() throws {
        let directory = TemporaryDirectory()
        let path = directory.path("relay.db")
        let raw = try sqliteDatabase(atSchema: 11, path: path)
        for (index, device) in ["dev-a", "dev-b", "dev-c"].enumerated() {
            try raw.execute(
                "INSERT INTO devices (id, device_token, date_added) VALUES ('\(device)', '\(String(repeating: "\(index)", count: 64))', 0)")
        }
        let rows = [(1, "dev-a", "discarded"), (2, "dev-b", "available"), (3, "dev-a", "available"), (4, "dev-b", "pending"), (5, "dev-a", "pending")]
        for (id, device, state) in rows {
            try raw.execute(
                """
                INSERT INTO jobs (id, public_id, device_id, state, payload, created_at, scheduled_at, expires_at, finalized_at)
                VALUES (\(id), 'p\(id)', '\(device)', '\(state)', x'00', \(id), \(id), 9999999999999,
                        \(state == "discarded" ? "1" : "NULL"))
                """)
        }
        _ = try SQLiteStore(path: path, now: t0)
        #expect(try raw.query("SELECT id, device_seq FROM jobs ORDER BY id") == [["1", "0"], ["2", "0"], ["3", "1"], ["4", "1"], ["5", "2"]])
        #expect(try raw.query("SELECT id, next_seq FROM devices ORDER BY id") == [["dev-a", "3"], ["dev-b", "2"], ["dev-c", "0"]])
    }

    /// SQLite uses the indexes the statements were written for: a job is found by its number through
    /// `jobs_by_device_seq`, a device's head through `jobs_one_head_per_device` and its dead letters through
    /// `jobs_dead_by_device`, never by a scan of the queue (the claim at a million queued depends on it,
    /// docs/performance.md).
    @Test func aDevicesJobsAreFoundThroughTheirIndexes() throws {
        let db = try TestDatabase()
        let raw = try RawSQLite(path: db.path)
        func plan(_ sql: String) throws -> String {
            let bound = sql.replacingOccurrences(of: "?1", with: "1").replacingOccurrences(of: "?2", with: "'d'")
                .replacingOccurrences(of: "?", with: "'d'")
            return try raw.query("EXPLAIN QUERY PLAN \(bound)").map { $0.last ?? "" }.joined(separator: "; ")
        }
        for statement in [
            SQLiteStore.promoteNumbered, SQLiteStore.pendingJobNumbered, SQLiteStore.foldableJobNumbered, SQLiteStore.deleteNumbered
        ] {
            let found = try plan(statement)
            #expect(found.contains("USING INDEX jobs_by_device_seq"), "\(statement): \(found)")
        }
        #expect(try plan(SQLiteStore.deleteDeadLetters).contains("USING INDEX jobs_dead_by_device"))
        #expect(
            try plan("SELECT h.device_seq FROM jobs h WHERE h.device_id = 'd' AND \(SQLiteStore.isHead("h"))").contains("jobs_one_head_per_device"))
    }

    /// Without a foreign key nothing stops a job row naming a device that does not exist: a binary older than schema
    /// 12, still running through the upgrade, deletes a device the way the cascade used to (its row only). Those
    /// jobs could never be sent: the claim that meets one drops every job of the device, and a replay of such a
    /// dead letter removes it without queueing it.
    @Test func jobsWhoseDeviceIsGoneAreDroppedWhenOneIsClaimed() throws {
        let db = try TestDatabase()
        let a = try db.device(1)
        let b = try db.device(2)
        let c = try db.device(3)
        try db.enqueue(a, "a0")
        try db.enqueue(b, "b0", "b1", "b2")
        try db.enqueue(c, "c0")
        // c's only job becomes a dead letter; a's and b's heads go back to waiting to be claimed.
        let heads = try db.claim()
        let c0 = try #require(heads.first { $0.deviceID == c })
        _ = try db.store.finish([.dead(c0, "BadDeviceToken")], worker: "w1", now: t0)
        let raw = try RawSQLite(path: db.path)
        try raw.execute("UPDATE jobs SET state = 'available', attempted_by = NULL, lease_expires_at = NULL WHERE state = 'running'")
        try raw.execute("DELETE FROM devices WHERE id IN ('\(b)', '\(c)')")

        #expect(try db.claim().map(\.label) == ["a0"])
        #expect(try raw.query("SELECT count(*) FROM jobs WHERE device_id = '\(b)'") == [["0"]])
        #expect(try db.store.replayDeadLetters(DeadLetterFilter(deviceID: c), limit: 10, now: t0, ttl: .seconds(60)) == 0)
        #expect(try raw.query("SELECT count(*) FROM jobs WHERE device_id = '\(c)'") == [["0"]])
    }
}
