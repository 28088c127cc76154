import Testing

@testable import Queue

/// When the store truncates SQLite's write-ahead log (where delivered notification text outlives its row).
@Suite struct WALTruncationPolicyTests {
    let policy = WALTruncationPolicy(interval: .seconds(60))
    let t0 = ContinuousClock.now

    @Test func nothingWrittenSinceTheLastTruncationMeansNothingToDo() {
        #expect(!policy.shouldTruncate(now: t0 + .seconds(600), lastWrite: nil, lastTruncation: t0))
        #expect(!policy.shouldTruncate(now: t0 + .seconds(600), lastWrite: t0 - .seconds(1), lastTruncation: t0))
    }

    @Test func aPauseInWritesTruncatesAfterTheIdleDelay() {
        #expect(policy.idleDelay == .seconds(1))
        #expect(!policy.shouldTruncate(now: t0 + .milliseconds(500), lastWrite: t0, lastTruncation: t0 - .seconds(5)))
        #expect(policy.shouldTruncate(now: t0 + .seconds(1), lastWrite: t0, lastTruncation: t0 - .seconds(5)))
    }

    @Test func writesThatNeverPauseStillTruncateEveryInterval() {
        // A write 10 ms ago (never idle), but the last truncation was a whole interval ago.
        #expect(!policy.shouldTruncate(now: t0 + .seconds(59), lastWrite: t0 + .seconds(59) - .milliseconds(10), lastTruncation: t0))
        #expect(policy.shouldTruncate(now: t0 + .seconds(60), lastWrite: t0 + .seconds(60) - .milliseconds(10), lastTruncation: t0))
    }

    @Test func aShortIntervalShortensTheIdleDelayToo() {
        #expect(WALTruncationPolicy(interval: .milliseconds(200)).idleDelay == .milliseconds(200))
    }
}
