import Common
import Deliver
import Foundation
import Simulator
import Testing

/// A configuration fault (the key revoked, the topic not on the key) pauses delivery; once it is put right at
/// Apple's end (the key enabled again, the topic added), delivery resumes by itself, without a restart, and nothing
/// queued meanwhile is lost or reordered (SPEC §4). No test covered the second half before (issue 37).
@Suite struct ConfigurationFaultTests {
    @Test(arguments: [(403, "InvalidProviderToken"), (400, "BadTopic")])
    func deliveryResumesOnceTheFaultIsFixedWithoutARestart(status: Int, reason: String) throws {
        let h = try DeliveryHarness()
        defer { h.stop() }
        let first = try h.device(1)
        let second = try h.device(2)
        h.simulator.faults.withLock { $0.byToken[first.token] = .init(status: status, reason: reason) }
        try h.enqueue(first.id, ["a1"])
        #expect(h.waitUntil { (try? h.store.currentPause(since: 0)) == reason }, "paused")
        try h.enqueue(first.id, ["a2"])
        try h.enqueue(second.id, ["b1"])
        h.simulator.faults.withLock { $0.byToken = [:] }  // put right at Apple's end
        h.clock.advance(.seconds(61))  // the pause's next probe is due
        h.engine.wake()
        #expect(h.waitUntil { h.acceptedBodies(first.token) == ["a1", "a2"] }, "the refused push and the one after it, in order")
        #expect(h.waitUntil { h.acceptedBodies(second.token) == ["b1"] })
        #expect(h.waitUntil { (try? h.store.currentPause(since: 0)) == nil }, "the pause is over")
        #expect(try h.store.stats().deadLettersByReason.isEmpty, "nothing was given up on")
    }
}
