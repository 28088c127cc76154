import Common
import Foundation
import Testing

@testable import Queue

/// Each SQLite connection keeps every statement text it prepared, for the life of the process: a text that changes
/// with a value would grow it without end. A deliverer or an ingest process must stay flat over weeks.
@Suite struct PreparedStatementCacheTests {
    let t0 = TestDatabase.t0

    /// A digest dead-lettered with the jobs merged into it, at a new millisecond each time (an outage's expiries).
    @Test func deadLetteringDigestsPreparesNoStatementPerMillisecond() throws {
        let db = try TestDatabase(.sqlite)
        let store = try #require(db.store as? SQLiteStore)
        let device = try db.device(1)
        var counts: [Int] = []
        for round in 0..<6 {
            let now = t0 + Int64(round) * 1000
            try db.enqueue(device, "head \(round)", "merged \(round)", now: now)
            let head = try #require(try db.claim(at: now).first)
            let merged = try store.pendingJobs(deviceID: device, limit: 10).map(\.asMerged)
            #expect(try store.finish([JobOutcome(head, kind: .abandon(reason: "Expired"), merged: merged)], worker: "w1", now: now) == [true])
            counts.append(store.preparedStatementCount)
        }
        #expect(Set(counts.dropFirst()).count == 1, "statements kept after each round: \(counts)")
    }

    /// A waiting Test request's outcome is read for every request waiting at that moment: any number up to
    /// thousands.
    @Test func readingOutcomesForAnyNumberOfWaitersKeepsAFewStatements() throws {
        let db = try TestDatabase(.sqlite)
        let store = try #require(db.store as? SQLiteStore)
        let before = store.preparedStatementCount
        for waiting in 1...600 {
            _ = try store.reportedOutcomes(publicIDs: (0..<waiting).map { "id-\($0)" })
        }
        #expect(store.preparedStatementCount - before <= 10, "one statement per power of two up to 512")
    }
}
