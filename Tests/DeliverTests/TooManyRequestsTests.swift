import Common
import Deliver
import Foundation
import Simulator
import Testing

/// 429 TooManyRequests is about one device token ("too many requests were made consecutively to the same device
/// token"): that device backs off and is retried, every other device's pushes go on as before, and nothing is taken
/// for an outage or dead-lettered (SPEC §4). No test covered it before (issue 37).
@Suite struct TooManyRequestsTests {
    @Test func tooManyRequestsBacksOffThatDeviceOnly() throws {
        let h = try DeliveryHarness()
        defer { h.stop() }
        let busy = try h.device(1)
        let calm = try h.device(2)
        h.simulator.faults.withLock { $0.byToken[busy.token] = .init(status: 429, reason: "TooManyRequests") }
        try h.enqueue(busy.id, ["b1", "b2"])
        #expect(h.waitUntil { (h.simulator.answersByStatus[429] ?? 0) >= 2 }, "refused, and retried")
        try h.enqueue(calm.id, ["c1", "c2", "c3"])
        #expect(h.waitUntil { h.acceptedBodies(calm.token) == ["c1", "c2", "c3"] }, "the other device is not held up")
        #expect(h.acceptedBodies(busy.token).isEmpty)
        #expect(
            h.simulator.received.filter { $0.token == busy.token }.allSatisfy {
                $0.payload == h.simulator.received.first { $0.token == busy.token }?.payload
            },
            "only the device's head was tried, never the push behind it")
        #expect(try h.store.currentPause(since: 0) == nil)
        h.simulator.faults.withLock { $0.byToken = [:] }
        #expect(h.waitUntil { h.acceptedBodies(busy.token) == ["b1", "b2"] }, "then delivered, in order")
        #expect(try h.store.stats().deadLettersByReason.isEmpty)
    }
}
