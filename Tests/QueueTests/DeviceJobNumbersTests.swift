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

    /// Without a foreign key nothing stops a job row naming a device that does not exist (written by hand, or by a
    /// fault): it could never be sent, so a claim drops it instead of leasing it again every lease.
    @Test func aJobWhoseDeviceIsGoneIsDroppedWhenClaimed() throws {
        let db = try TestDatabase()
        let a = try db.device(1)
        try db.enqueue(a, "a0")
        let raw = try RawSQLite(path: db.path)
        try raw.execute(
            """
            INSERT INTO jobs (public_id, device_id, device_seq, state, payload, created_at, scheduled_at, expires_at)
            VALUES ('orphan', 'NoSuchDevice__', 0, 'available', x'00', 0, 0, 9999999999999)
            """)
        #expect(try db.claim().map(\.label) == ["a0"])
        #expect(try raw.query("SELECT count(*) FROM jobs WHERE public_id = 'orphan'") == [["0"]])
    }
}
