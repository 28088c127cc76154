import Common
import Deliver
import Foundation
import Simulator
import Testing

/// LATE_NOTICE (SPEC §3) through the engine: a push that reaches APNs more than `lateNotice` (120 s in the harness)
/// after its webhook was accepted says when the event happened; one within it says nothing more. Before, only the
/// wording was tested on its own, and the engine's part was a prefix check.
@Suite struct LateNoticeTests {
    @Test func aPushSentPastLateNoticeSaysWhenTheEventHappenedAndOneWithinItDoesNot() throws {
        let h = try DeliveryHarness()
        defer { h.stop() }
        let late = try h.device(1)
        let onTime = try h.device(2)
        h.simulator.faults.withLock { $0.unavailableUntil = Int64.max }  // an outage holds both pushes back
        let before = h.clock.nowMillis()
        try h.enqueue(late.id, ["late"])
        let after = h.clock.nowMillis()
        #expect(h.waitUntil { (h.simulator.answersByStatus[503] ?? 0) >= 1 }, "held back by the outage")
        h.clock.advance(.seconds(61))
        try h.enqueue(onTime.id, ["on time"])
        h.clock.advance(.seconds(60))  // "late" is now 121 s old, "on time" 60 s (plus the test's own run time)
        h.simulator.faults.withLock { $0.unavailableUntil = 0 }
        h.engine.wake()
        #expect(h.waitUntil { !h.acceptedBodies(late.token).isEmpty && !h.acceptedBodies(onTime.token).isEmpty })
        // The minute is the acceptance's, read before and after the enqueue (a minute may turn in between).
        let expected = Set([before, after].map { "late · delayed, event at \(RFC3339.clockString(epochMillis: $0)) UTC" })
        #expect(h.acceptedBodies(late.token).count == 1 && expected.contains(h.acceptedBodies(late.token)[0]), "\(h.acceptedBodies(late.token))")
        #expect(h.acceptedBodies(onTime.token) == ["on time"])
    }
}
