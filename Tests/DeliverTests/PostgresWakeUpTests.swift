import Common
import Deliver
import Foundation
import Queue
import TestSupport
import Testing

/// A deliverer on PostgreSQL is woken by the NOTIFY of the transaction that gave it work (issue 39), not by its poll:
/// each engine here polls once an hour, so a push that arrives at all was woken by the store's LISTEN thread. Jobs
/// are written through a second store, a connection of its own, as a separate `ingest` process writes them.
@Suite struct PostgresWakeUpTests {
    /// Far longer than any test may take: a push that waited for the poll would miss every deadline here.
    static let noPoll: Duration = .seconds(3600)

    func sleepingDeliverer() throws -> (DeliveryHarness, PostgresStore) {
        let h = try DeliveryHarness(onPostgres: true, pollInterval: Self.noPoll, idlePollInterval: Self.noPoll)
        return (h, try PostgresStore(url: h.databaseURL!, now: h.clock.nowMillis()))
    }

    /// Each job is written once the last one was delivered and recorded, so the engine has gone back to sleep.
    @Test func jobsCommittedByAnotherConnectionWakeASleepingDeliverer() throws {
        let (h, ingest) = try sleepingDeliverer()
        defer { h.stop() }
        let device = try h.device(1)
        var sent: [String] = []
        for label in ["first", "second", "third"] {
            try h.enqueue(device.id, [label], through: ingest)
            sent.append(label)
            try #require(h.waitUntil(timeout: .seconds(60)) { h.acceptedBodies(device.token) == sent }, "\(label) was never sent")
            try #require(try h.waitUntil(timeout: .seconds(60)) { try h.store.liveJobCount() == 0 })
        }
    }

    /// The LISTEN connection's backend ended by the server (a restart, an administrator): the thread connects
    /// again, and the next job still wakes the engine.
    @Test func theWakeUpSurvivesTheLossOfTheListenConnection() throws {
        let (h, ingest) = try sleepingDeliverer()
        defer { h.stop() }
        let admin = try RawPostgres(h.databaseURL!)
        let device = try h.device(2)
        try h.enqueue(device.id, ["before"], through: ingest)
        #expect(h.waitUntil(timeout: .seconds(60)) { h.acceptedBodies(device.token) == ["before"] })
        #expect(try h.waitUntil(timeout: .seconds(60)) { try !Self.listenBackends(admin).isEmpty }, "listening")
        let killed = try #require(try Self.listenBackends(admin).first)
        try admin.execute("SELECT pg_terminate_backend(\(killed))")
        #expect(try h.waitUntil(timeout: .seconds(60)) { try Self.listenBackends(admin).contains { $0 != killed } }, "listening again")
        try h.enqueue(device.id, ["after"], through: ingest)
        #expect(h.waitUntil(timeout: .seconds(60)) { h.acceptedBodies(device.token) == ["before", "after"] })
    }

    /// Stopping the engine ends the LISTEN thread and closes its connection: nothing of the deliverer is left behind.
    @Test func theListenThreadEndsWithTheEngine() throws {
        let (h, _) = try sleepingDeliverer()
        let store = try #require(h.store as? PostgresStore)
        let admin = try RawPostgres(h.databaseURL!)
        #expect(store.isListening)
        #expect(try h.waitUntil(timeout: .seconds(60)) { try !Self.listenBackends(admin).isEmpty }, "listening")
        h.stop()
        #expect(!store.isListening)
        #expect(try h.waitUntil(timeout: .seconds(60)) { try Self.listenBackends(admin).isEmpty }, "its connection is closed")
    }

    /// The server processes of this database whose last statement was the deliverer's LISTEN.
    static func listenBackends(_ admin: RawPostgres) throws -> [String] {
        try admin.query(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query = 'LISTEN kumapush_jobs'"
        ).map { $0[0] }
    }
}
