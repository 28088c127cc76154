import Common
import Deliver
import Foundation
import Simulator
import Testing

/// The delivery engine on each store: the other delivery suites run it on SQLite only, and PostgreSQL's claim,
/// completion and removal are different SQL (issue 37: "the delivery engine on PostgreSQL in-process"). These are
/// the engine's core promises, run on both.
@Suite struct DeliveryOnBothStoresTests {
    enum Store: String, CaseIterable, CustomTestStringConvertible {
        case sqlite, postgres
        var testDescription: String { rawValue }
    }

    func harness(_ store: Store) throws -> DeliveryHarness { try DeliveryHarness(onPostgres: store == .postgres) }

    /// Per-device order through an outage's retries, two devices at once, and nothing left behind.
    @Test(arguments: Store.allCases) func pushesArriveInPerDeviceOrderThroughRetries(_ store: Store) throws {
        let h = try harness(store)
        defer { h.stop() }
        let first = try h.device(1)
        let second = try h.device(2)
        h.simulator.faults.withLock { $0.unavailableUntil = Int64.max }
        try h.enqueue(first.id, ["a0", "a1", "a2"])
        try h.enqueue(second.id, ["b0", "b1"])
        #expect(h.waitUntil { (h.simulator.answersByStatus[503] ?? 0) >= 2 }, "refused, retried")
        h.simulator.faults.withLock { $0.unavailableUntil = 0 }
        h.clock.advance(.seconds(60))  // any backoff or probe is due (and within LATE_NOTICE, so bodies stay as sent)
        h.engine.wake()
        #expect(h.waitUntil { h.acceptedBodies(first.token) == ["a0", "a1", "a2"] && h.acceptedBodies(second.token) == ["b0", "b1"] })
        #expect(try h.waitUntil { try h.store.liveJobCount() == 0 })
        #expect(try h.store.countDeadLetters(.init()) == 0)
    }

    /// 410 removes the device and leaves a tombstone; BadDeviceToken dead-letters the push and keeps the device.
    @Test(arguments: Store.allCases) func refusalsRemoveOrDeadLetterAsAPNsSays(_ store: Store) throws {
        let h = try harness(store)
        defer { h.stop() }
        let gone = try h.device(3)
        let bad = try h.device(4)
        h.simulator.faults.withLock {
            $0.byToken[gone.token] = .init(status: 410, reason: "Unregistered")
            $0.byToken[bad.token] = .init(status: 400, reason: "BadDeviceToken")
        }
        try h.enqueue(gone.id, ["x", "y"])
        try h.enqueue(bad.id, ["z"])
        #expect(try h.waitUntil { try h.store.device(id: gone.id) == nil })
        #expect(try h.store.tombstone(deviceID: gone.id)?.reason == "Unregistered")
        #expect(try h.waitUntil { try h.store.stats().deadLettersByReason["BadDeviceToken"] == 1 })
        #expect(try h.store.device(id: bad.id) != nil, "BadDeviceToken keeps the device")
        #expect(try h.waitUntil { try h.store.liveJobCount() == 0 })
    }
}
