import Testing

@testable import Queue

/// `stats()` read once for both stores (issue 38): what each count is made of.
@Suite struct QueueCountsTests {
    @Test func eachStatementsRowsBecomeTheirCount() throws {
        var asked: [String] = []
        let stats = try QueueStats.counted { sql in
            asked.append(sql)
            switch sql {
            case let sql where sql.contains("FROM devices"): return [("", 3)]
            case let sql where sql.contains("FROM tombstones"): return [("", 1)]
            case let sql where sql.contains("GROUP BY state"): return [("pending", 2), ("running", 1), ("no such state", 9)]
            case let sql where sql.contains("GROUP BY last_error"): return [("BadDeviceToken", 4)]
            default: return [("", nil)]
            }
        }
        #expect(asked.count == 5)
        #expect(
            stats
                == QueueStats(
                    devices: 3, tombstones: 1, jobsByState: [.pending: 2, .running: 1],
                    deadLettersByReason: ["BadDeviceToken": 4], oldestJobCreatedAt: nil))
    }

    /// The oldest job is the oldest live one: a dead letter older than every queued job is not the queue's age.
    @Test(arguments: StoreKind.allCases) func theOldestJobIsTheOldestLiveOne(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let device = try db.device(1)
        try db.enqueue(device, "old", now: TestDatabase.t0)
        _ = try db.store.finish(try db.claim().map { .dead($0, "BadTopic") }, worker: "w1", now: TestDatabase.t0 + 1)
        try db.enqueue(device, "new", now: TestDatabase.t0 + 50)
        #expect(try db.store.stats().oldestJobCreatedAt == TestDatabase.t0 + 50)
    }
}
