import Testing

@testable import Queue

/// What a digest carries and seals (`DigestCarry.decide`), without a database.
@Suite struct DigestCarryTests {
    func waiting(_ positions: Int64..., test: Int64? = nil) -> [DigestCarry.Waiting] {
        positions.map { DigestCarry.Waiting(position: $0, reportsOutcome: $0 == test) }
    }

    /// A device far below its cap of 100, its newest waiting alert at `foldTarget`.
    func device(sealedThrough: Int64 = 0, live: Int = 10, foldTarget: Int64?) -> DigestCarry.Device {
        DigestCarry.Device(sealedThrough: sealedThrough, live: live, foldTarget: foldTarget)
    }

    @Test func belowTheBurstTheHeadGoesAloneAndNothingIsSealed() {
        #expect(DigestCarry.decide(waiting(4, 5), device: device(foldTarget: 5), cap: 100, minimum: 3) == .init(count: 0, sealThrough: nil))
    }

    @Test func aDigestCarriesTheWaitingJobsUpToATestJobAndSealsThroughTheLast() {
        #expect(
            DigestCarry.decide(waiting(4, 5, 6, 7, test: 6), device: device(foldTarget: 7), cap: 100, minimum: 1)
                == .init(count: 2, sealThrough: 5))
        #expect(
            DigestCarry.decide(waiting(4, 5), device: device(sealedThrough: 3, foldTarget: 5), cap: 100, minimum: 0)
                == .init(count: 2, sealThrough: 5), "an old seal moves on")
    }

    @Test func withATestJobFirstNothingIsCarriedOrSealed() {
        #expect(DigestCarry.decide(waiting(4, 5, test: 4), device: device(foldTarget: 5), cap: 100, minimum: 0) == .init(count: 0, sealThrough: nil))
    }

    /// Two or more below the cap, ingest reaches it only through an alert's row of its own, newer than the seal: the
    /// digest carries every waiting job, its newest included.
    @Test func twoBelowTheCapEveryWaitingJobIsCarried() {
        #expect(DigestCarry.decide(waiting(4, 5, 6), device: device(live: 4, foldTarget: 6), cap: 6, minimum: 0) == .init(count: 3, sealThrough: 6))
    }

    /// At the cap, the newest waiting job is where ingest folds: the digest neither carries nor seals it.
    @Test func atTheCapTheNewestWaitingJobIsLeftOut() {
        #expect(DigestCarry.decide(waiting(4, 5, 6), device: device(live: 4, foldTarget: 6), cap: 4, minimum: 0) == .init(count: 2, sealThrough: 5))
        #expect(
            DigestCarry.decide(waiting(4, 5, 6), device: device(live: 5, foldTarget: 6), cap: 4, minimum: 0) == .init(count: 2, sealThrough: 5),
            "above it too (a smaller DEVICE_QUEUE_MAX since)")
        #expect(
            DigestCarry.decide(waiting(4, 5, 6, test: 6), device: device(live: 4, foldTarget: 5), cap: 4, minimum: 0)
                == .init(count: 1, sealThrough: 4), "the newest alert, behind which only a Test job waits")
    }

    /// One below the cap, a Test request may take the last place, and the next alert folds into the newest waiting
    /// alert: that one is left out as at the cap.
    @Test func oneBelowTheCapTheNewestWaitingJobIsLeftOut() {
        #expect(DigestCarry.decide(waiting(4, 5, 6), device: device(live: 4, foldTarget: 6), cap: 5, minimum: 0) == .init(count: 2, sealThrough: 5))
    }

    @Test func atTheCapWithOneJobWaitingNothingIsCarriedOrSealed() {
        #expect(DigestCarry.decide(waiting(4), device: device(live: 2, foldTarget: 4), cap: 2, minimum: 0) == .init(count: 0, sealThrough: nil))
    }

    /// The fold target past the jobs read (more wait than a digest merges): all those read go.
    @Test func atTheCapAFoldTargetPastTheReadLeavesTheReadWhole() {
        #expect(DigestCarry.decide(waiting(4, 5), device: device(live: 9, foldTarget: 12), cap: 9, minimum: 0) == .init(count: 2, sealThrough: 5))
    }

    /// A retried digest carries what its first attempt sealed and no more, and the seal stays: not the job a
    /// deliverer on a larger cap than ingest's let ingest add past the cap meanwhile (6), which stays open.
    @Test func aSealCoveringTheOldestWaitingJobStaysAndBoundsWhatIsCarried() {
        #expect(
            DigestCarry.decide(waiting(4, 5, 6), device: device(sealedThrough: 5, live: 4, foldTarget: 6), cap: 3, minimum: 0)
                == .init(count: 2, sealThrough: nil))
    }

    /// At the cap, a digest attempted again carries what it carried the first time: the left-out job, folded into
    /// meanwhile, is still left out.
    @Test func atTheCapARetriedDigestIsUnchanged() {
        let first = DigestCarry.decide(waiting(4, 5, 6), device: device(live: 4, foldTarget: 6), cap: 4, minimum: 0)
        let retried = DigestCarry.decide(waiting(4, 5, 6), device: device(sealedThrough: 5, live: 4, foldTarget: 6), cap: 4, minimum: 0)
        #expect(first == .init(count: 2, sealThrough: 5))
        #expect(retried == .init(count: 2, sealThrough: nil))
    }
}
