import Common
import Foundation
import Queue
import TestSupport
import Testing

/// Every push to a device with a push in the last minute asks whether a digest is due; the backlog read that seals
/// (`carryBacklog`) is a write that locks the device, so the engine looks first and only a device with enough jobs
/// waiting pays for it (a review found a locking write per push to every active device, storm or not).
@Suite struct DigestLookTests {
    @Test func pushesOneAtATimeTakeNoSealedReadAndAStormStillDoes() throws {
        let counting = ClaimCounter()
        let h = try DeliveryHarness(deviceBurst: 3, engineStore: { ClaimCounting(inner: $0, counter: counting) })
        defer { h.stop() }
        let device = try h.device(1)
        for label in ["a", "b", "c"] {  // each delivered before the next arrives: nothing ever waits behind a head
            try h.enqueue(device.id, [label])
            #expect(h.waitUntil { h.acceptedBodies(device.token).last == label })
        }
        #expect(counting.sealedReads.load(ordering: .relaxed) == 0, "no digest was due, so no device lock was taken")

        h.clock.advance(.seconds(6))  // past the digest window of the last push
        _ = try h.store.enqueue(
            (1...4).map { AlertStormCapTests.alert(device.id, $0) }, now: h.clock.nowMillis(), ttl: .seconds(3600))
        h.engine.wake()
        #expect(h.waitUntil { (try? h.store.liveJobCount()) == 0 })
        #expect(counting.sealedReads.load(ordering: .relaxed) >= 1, "over the burst with jobs waiting: the digest's sealed read")
        #expect(h.metrics.value("kumapush_digests_total") == 1)
    }
}
