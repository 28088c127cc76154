import Testing

@testable import Queue

/// What a digest carries and seals (`DigestCarry.decide`), without a database.
@Suite struct DigestCarryTests {
    func waiting(_ positions: Int64..., test: Int64? = nil) -> [DigestCarry.Waiting] {
        positions.map { DigestCarry.Waiting(position: $0, reportsOutcome: $0 == test) }
    }

    @Test func belowTheBurstTheHeadGoesAloneAndNothingIsSealed() {
        #expect(DigestCarry.decide(waiting(4, 5), sealedThrough: 0, minimum: 3) == .init(count: 0, sealThrough: nil))
    }

    @Test func aDigestCarriesTheWaitingJobsUpToATestJobAndSealsThroughTheLast() {
        #expect(DigestCarry.decide(waiting(4, 5, 6, 7, test: 6), sealedThrough: 0, minimum: 1) == .init(count: 2, sealThrough: 5))
        #expect(DigestCarry.decide(waiting(4, 5), sealedThrough: 3, minimum: 0) == .init(count: 2, sealThrough: 5), "an old seal moves on")
    }

    @Test func withATestJobFirstNothingIsCarriedOrSealed() {
        #expect(DigestCarry.decide(waiting(4, 5, test: 4), sealedThrough: 0, minimum: 0) == .init(count: 0, sealThrough: nil))
    }

    /// A retried digest carries what its first attempt sealed and no more: the job ingest added past the cap
    /// meanwhile (6) stays open for the alerts after it.
    @Test func aSealCoveringTheOldestWaitingJobStaysAndBoundsWhatIsCarried() {
        #expect(DigestCarry.decide(waiting(4, 5, 6), sealedThrough: 5, minimum: 0) == .init(count: 2, sealThrough: nil))
    }
}
