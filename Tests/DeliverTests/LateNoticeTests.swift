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
        // Stored as if their webhooks came 121 s and 60 s ago: no clock is moved while a push may be built (an
        // outage held back and then lifted raced a push built before the move, on a loaded machine).
        let acceptedAt = h.clock.nowMillis() - 121_000
        try h.enqueue(late.id, ["late"], acceptedAgo: .seconds(121))
        try h.enqueue(onTime.id, ["on time"], acceptedAgo: .seconds(60))
        #expect(h.waitUntil { !h.acceptedBodies(late.token).isEmpty && !h.acceptedBodies(onTime.token).isEmpty })
        // The minute is the acceptance's (the clock only moves forward, and by less than a minute in the test).
        let expected = Set([acceptedAt, acceptedAt + 1000].map { "late · delayed, event at \(RFC3339.clockString(epochMillis: $0)) UTC" })
        #expect(h.acceptedBodies(late.token).count == 1 && expected.contains(h.acceptedBodies(late.token)[0]), "\(h.acceptedBodies(late.token))")
        #expect(h.acceptedBodies(onTime.token) == ["on time"])
    }
}
