import Common
import Deliver
import Foundation
import Simulator
import Testing

/// The simulator behind the delivery tests keeps APNs's stream rule (reference/apns.md §1.6), as the e2e fake
/// does: a connection starts at one stream, an accepted push raises it, a rejected one drops it back to one. A
/// simulator that granted its full limit from the start let every delivery test pass on a client that never
/// learnt the limit from SETTINGS.
@Suite struct APNsStreamLimitTests {
    @Test func aConnectionStartsAtOneStreamIsRaisedByAnAcceptedPushAndDroppedByARejectedOne() throws {
        let h = try DeliveryHarness(streams: 100, connections: 1)
        defer { h.stop() }
        let accepted = try h.device(1)
        let rejected = try h.device(2)
        h.simulator.faults.withLock { $0.byToken[rejected.token] = .init(status: 400, reason: "BadDeviceToken") }
        #expect(h.waitUntil { h.pool.readyConnections == 1 && h.pool.freeStreams == 1 }, "one stream before any push")

        try h.enqueue(accepted.id, ["accepted"])
        #expect(h.waitUntil { h.acceptedBodies(accepted.token).count == 1 })
        #expect(h.waitUntil { h.pool.freeStreams == 100 }, "raised by the accepted push")

        try h.enqueue(rejected.id, ["rejected"])
        #expect(h.waitUntil { h.simulator.answersByStatus[400] == 1 })
        #expect(h.waitUntil { h.pool.freeStreams == 1 }, "dropped back to one by the rejection")

        try h.enqueue(accepted.id, ["accepted again"])
        #expect(h.waitUntil { h.acceptedBodies(accepted.token).count == 2 })
        #expect(h.waitUntil { h.pool.freeStreams == 100 }, "raised again")
    }
}
