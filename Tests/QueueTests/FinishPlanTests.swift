import Testing

@testable import Queue

/// `finish`'s decisions (FinishPlan), without a database: each verdict's writes, the lease fence, the replaced
/// token. The invariants the chaos suite checks end to end are in `QueuePlanInvariantTests`.
@Suite struct FinishPlanTests {
    let now: Int64 = 1_000

    func claimed(_ id: Int64, device: String = "D", attempt: Int = 1, token: String = "t1", test: Bool = false) -> ClaimedJob {
        ClaimedJob(
            id: id, publicID: "p\(id)", deviceID: device, deviceToken: token, downNotificationLevel: .normal, payload: [],
            attempt: attempt, createdAt: 0, expiresAt: .max, reportsOutcome: test)
    }

    func outcome(_ id: Int64, _ kind: JobOutcome.Kind, device: String = "D", test: Bool = false, merged: [MergedJob] = []) -> JobOutcome {
        JobOutcome(claimed(id, device: device, test: test), kind: kind, merged: merged)
    }

    /// Every listed job held at attempt 1.
    func held(_ ids: Int64..., tokens: [String: String] = [:]) -> FinishPlan.State {
        FinishPlan.State(held: Dictionary(uniqueKeysWithValues: ids.map { ($0, 1) }), tokens: tokens)
    }

    @Test func aDeliveredHeadIsDeletedItsDeviceSucceedsAndItsNextJobIsPromoted() {
        let plan = FinishPlan.plan([outcome(7, .delivered)], held(7), now: now)
        var expected = FinishPlan()
        expected.applied = [true]
        expected.deletes = [7]
        expected.successes = ["D": 1]
        expected.promotions = [.init(device: "D", afterJob: 7)]
        #expect(plan == expected)
    }

    @Test func aDeliveredTestReportsAndADigestSettlesWhatItCarried() {
        let merged = [MergedJob(id: 8, foldedCount: 2), MergedJob(id: 9)]
        let plan = FinishPlan.plan([outcome(7, .delivered, test: true, merged: merged)], held(7), now: now)
        #expect(plan.reports == [.init(publicID: "p7", kind: .delivered, reason: "")])
        #expect(plan.settlements == [.init(device: "D", jobs: merged, deadLetterReason: nil, attempt: 1)])
        #expect(plan.successes == ["D": 1], "the settled jobs are the store's to count: only what it settles ends")
    }

    @Test func oneSuccessUpdatePerDeviceCountingItsHeads() {
        let outcomes = [outcome(1, .delivered, device: "A"), outcome(2, .delivered, device: "B"), outcome(3, .delivered, device: "A")]
        let plan = FinishPlan.plan(outcomes, held(1, 2, 3), now: now)
        #expect(plan.successes == ["A": 2, "B": 1])
        #expect(plan.deletes == [1, 2, 3])
        #expect(plan.promotions.map(\.afterJob) == [1, 2, 3])
    }

    /// The lease fence: a job no longer held, held by someone else (absent from `held`), or held at another attempt
    /// (taken over and claimed again) changes nothing, whatever the verdict.
    @Test func anOutcomeForAJobNoLongerHeldAtItsAttemptChangesNothing() {
        let kinds: [JobOutcome.Kind] = [
            .delivered, .retry(at: 5, error: "e"), .deadLetter(reason: "r"), .abandon(reason: "r"), .postpone(until: 5),
            .removeDevice(reason: "Unregistered")
        ]
        for kind in kinds {
            for state in [FinishPlan.State(held: [:]), FinishPlan.State(held: [7: 2], tokens: ["D": "t1"])] {
                var expected = FinishPlan()
                expected.applied = [false]
                #expect(FinishPlan.plan([outcome(7, kind, test: true, merged: [MergedJob(id: 8)])], state, now: now) == expected)
            }
        }
    }

    @Test func aJobIsActedOnOnceEvenIfTwoOutcomesNameIt() {
        let plan = FinishPlan.plan([outcome(7, .delivered), outcome(7, .deadLetter(reason: "r"))], held(7), now: now)
        #expect(plan.applied == [true, false])
        #expect(plan.discards.isEmpty)
    }

    @Test func aRetryOnlyMakesTheJobRetryable() {
        var expected = FinishPlan()
        expected.applied = [true]
        expected.retries = [.init(jobID: 7, at: 50, error: "Busy")]
        #expect(FinishPlan.plan([outcome(7, .retry(at: 50, error: "Busy"), merged: [MergedJob(id: 8)])], held(7), now: now) == expected)
    }

    @Test func aDeadLetterIsKeptRecordedOnTheDeviceAndLetsTheNextJobGo() {
        let merged = [MergedJob(id: 8, foldedCount: 1)]
        let plan = FinishPlan.plan([outcome(7, .deadLetter(reason: "BadTopic"), test: true, merged: merged)], held(7), now: now)
        var expected = FinishPlan()
        expected.applied = [true]
        expected.discards = [.init(jobID: 7, reason: "BadTopic")]
        expected.reports = [.init(publicID: "p7", kind: .rejected, reason: "BadTopic")]
        expected.settlements = [.init(device: "D", jobs: merged, deadLetterReason: "BadTopic", attempt: 1)]
        expected.deviceErrors = [.init(device: "D", reason: "BadTopic", heads: 1)]
        expected.promotions = [.init(device: "D", afterJob: 7)]
        #expect(plan == expected)
    }

    @Test func anAbandonedJobTellsItsTestRequestTheRelayGaveUp() {
        let plan = FinishPlan.plan([outcome(7, .abandon(reason: "Expired"), test: true)], held(7), now: now)
        #expect(plan.reports == [.init(publicID: "p7", kind: .failed, reason: "Expired")])
        #expect(plan.discards == [.init(jobID: 7, reason: "Expired")])
        #expect(plan.deviceErrors.count == 1 && plan.promotions.count == 1)
    }

    @Test func aPostponedJobIsGivenBackUntilItsTime() {
        var expected = FinishPlan()
        expected.applied = [true]
        expected.giveBacks = [.init(jobID: 7, until: 60)]
        #expect(FinishPlan.plan([outcome(7, .postpone(until: 60))], held(7), now: now) == expected)
    }

    @Test func aTokenTheAppReplacedKeepsItsDeviceAndTheJobGoesBackNow() {
        let plan = FinishPlan.plan([outcome(7, .removeDevice(reason: "Unregistered"), test: true)], held(7, tokens: ["D": "t2"]), now: now)
        var expected = FinishPlan()
        expected.applied = [true]
        expected.giveBacks = [.init(jobID: 7, until: now)]
        #expect(plan == expected)
    }

    @Test func aGoneTokenLeavesATombstoneAndTheDeviceIsDeleted() {
        // The device still has the token the push went to; or it is gone already (no token read).
        for tokens in [["D": "t1"], [:]] {
            let plan = FinishPlan.plan([outcome(7, .removeDevice(reason: "Unregistered"), test: true)], held(7, tokens: tokens), now: now)
            var expected = FinishPlan()
            expected.applied = [true]
            expected.reports = [.init(publicID: "p7", kind: .unregistered, reason: "Unregistered")]
            expected.removals = [.init(device: "D", reason: "Unregistered")]
            #expect(plan == expected)
        }
    }

    @Test func onlyRemoveDeviceOutcomesNeedTheirDevicesToken() {
        let outcomes = [
            outcome(1, .delivered, device: "A"), outcome(2, .removeDevice(reason: "r"), device: "B"),
            outcome(3, .removeDevice(reason: "r"), device: "C")
        ]
        #expect(FinishPlan.devicesToReadTokensOf(outcomes) == ["B", "C"])
    }
}
