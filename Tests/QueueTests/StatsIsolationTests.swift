import Dispatch
import Foundation
import Queue
import Testing

/// A metrics scrape runs `stats()` — full scans of up to a million jobs. The delivery loop polls the change counter
/// and `/health` and webhooks read through the store meanwhile: none of them may wait for the scan.
@Suite struct StatsIsolationTests {
    @Test func deliveryPathReadsAnswerWhileAStatsScanHoldsItsConnection() throws {
        // The SQLite store's stats connection (holdingStatsConnection is its test hook).
        let db = try TestDatabase(.sqlite)
        let sqlite = try #require(db.store as? SQLiteStore)
        let device = try db.device(1)
        try db.enqueue(device, "a", "b")
        let answered = DispatchSemaphore(value: 0)
        try sqlite.holdingStatsConnection {
            // A scan is under way: the reads the delivery loop and the ingest path make must still answer.
            let store = db.store
            Thread {
                _ = try? store.changeCounter()
                try? store.ping()
                _ = try? store.tombstone(deviceID: device)
                _ = try? store.hasDueJobs(now: TestDatabase.t0)
                answered.signal()
            }.start()
            #expect(answered.wait(timeout: .now() + 10) == .success, "a delivery-path read waited for the stats scan")
        }
        #expect(try db.store.stats().jobsByState.values.reduce(0, +) == 2)
    }
}
