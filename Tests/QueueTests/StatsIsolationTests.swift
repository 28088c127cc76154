import Dispatch
import Foundation
import Testing

@testable import Queue

/// A metrics scrape runs `stats()` — full scans of up to a million jobs. The delivery loop polls the change counter
/// and `/health` and webhooks read through the store meanwhile: none of them may wait for the scan (SPEC §2.3:
/// cluster-wide figures are read on their own connection). On both stores.
@Suite struct StatsIsolationTests {
    @Test(arguments: StoreKind.allCases) func deliveryPathReadsAnswerWhileAStatsScanHoldsItsConnection(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let holder = try #require(db.store as? any StatsConnectionHolder)
        let device = try db.device(1)
        try db.enqueue(device, "a", "b")
        let answered = DispatchSemaphore(value: 0)
        try holder.holdingStatsConnection {
            // A scan is under way: the reads the delivery loop and the ingest path make must still answer.
            let store = db.store
            Thread {
                _ = try? store.changeCounter()
                try? store.ping()
                _ = try? store.tombstone(deviceID: device)
                _ = try? store.device(id: device)
                _ = try? store.hasDueJobs(now: TestDatabase.t0)
                _ = try? store.reportedOutcomes(publicIDs: ["x"])
                answered.signal()
            }.start()
            #expect(answered.wait(timeout: .now() + 10) == .success, "a delivery-path read waited for the stats scan")
        }
        #expect(try db.store.stats().jobsByState.values.reduce(0, +) == 2)
    }
}

/// Holds the connection `stats()` scans with, as a scrape under way does.
private protocol StatsConnectionHolder {
    func holdingStatsConnection(_ body: () -> Void) throws(StoreError)
}

extension SharedQueries {
    fileprivate func holdingStatsConnection(_ body: () -> Void) throws(StoreError) { try withStatsConnection { _ in body() } }
}

extension SQLiteStore: StatsConnectionHolder {}
extension PostgresStore: StatsConnectionHolder {}
