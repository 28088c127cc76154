import Common
import Foundation
import Queue
import TestSupport
import Testing

@Suite struct JobQueueTests {
    let t0 = TestDatabase.t0

    @Test(arguments: StoreKind.allCases) func claimTakesOnlyTheHeadJobOfEachDeviceInAcceptanceOrder(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let a = try db.device(1)
        let b = try db.device(2)
        try db.enqueue(a, "a1", "a2", "a3")
        try db.enqueue(b, "b1", "b2")
        let first = try db.claim()
        #expect(first.map(\.label) == ["a1", "b1"])
        #expect(first.allSatisfy { $0.attempt == 1 })
        #expect(try db.claim().isEmpty, "nothing more until the heads finish")

        _ = try db.store.finish([.delivered(first[0])], worker: "w1", now: t0)
        #expect(try db.claim().map(\.label) == ["a2"])
    }

    @Test(arguments: StoreKind.allCases) func aClaimedJobCarriesWhatIsNeededToSendIt(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let a = try db.device(7)
        _ = try db.store.updateDevice(id: a, token: nil, level: .timeSensitive)
        try db.enqueue(a, "payload", ttl: .seconds(90))
        let job = try #require(try db.claim().first)
        #expect(job.deviceID == a && job.deviceToken == String(format: "%064x", 7))
        #expect(job.downNotificationLevel == .timeSensitive)
        #expect(job.createdAt == t0 && job.expiresAt == t0 + 90_000)
        #expect(job.publicID.count == 36)
    }

    @Test(arguments: StoreKind.allCases) func aRetryingJobBlocksItsDeviceUntilDueButNotOtherDevices(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let a = try db.device(1)
        let b = try db.device(2)
        try db.enqueue(a, "a1", "a2")
        let a1 = try #require(try db.claim().first)
        #expect(try db.store.finish([.retry(a1, at: t0 + 1000)], worker: "w1", now: t0) == [true])
        try db.enqueue(b, "b1")
        #expect(try db.claim(at: t0 + 999).map(\.label) == ["b1"], "a2 must not overtake a1")
        let retried = try db.claim(at: t0 + 1000)
        #expect(retried.map(\.label) == ["a1"])
        #expect(retried.first?.attempt == 2)
    }

    @Test(arguments: StoreKind.allCases) func deliveryDeletesTheJobAndRecordsSuccessOnTheDevice(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let a = try db.device(1)
        try db.enqueue(a, "a1")
        let job = try #require(try db.claim().first)
        _ = try db.store.finish([.delivered(job)], worker: "w1", now: t0 + 42)
        #expect(try db.store.liveJobCount() == 0)
        let device = try #require(try db.store.device(id: a))
        #expect(device.lastSuccessfulNotification == t0 + 42 && device.lastDeliveryError == "")
    }

    @Test(arguments: StoreKind.allCases) func deadLetteringKeepsTheDeviceRecordsTheReasonAndLetsTheNextJobGo(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let a = try db.device(1)
        try db.enqueue(a, "a1", "a2")
        let a1 = try #require(try db.claim().first)
        #expect(try db.store.finish([.dead(a1, "BadDeviceToken")], worker: "w1", now: t0) == [true])
        let device = try #require(try db.store.device(id: a))
        #expect(device.lastDeliveryError == "BadDeviceToken")
        #expect(try db.claim().map(\.label) == ["a2"])
        #expect(try db.store.countDeadLetters(DeadLetterFilter()) == 1)
    }

    @Test(arguments: StoreKind.allCases) func removeDeviceDeletesItsJobsAndLeavesATombstone(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let a = try db.device(1)
        try db.enqueue(a, "a1", "a2", "a3")
        let a1 = try #require(try db.claim().first)
        let outcome = JobOutcome(a1, kind: .removeDevice(reason: "Unregistered"))
        #expect(try db.store.finish([outcome], worker: "w1", now: t0) == [true])
        #expect(try db.store.device(id: a) == nil)
        #expect(try db.store.tombstone(deviceID: a)?.reason == "Unregistered")
        #expect(try db.store.liveJobCount() == 0)
        #expect(try db.kind.rawQuery(db.location, "SELECT count(*) FROM jobs") == [["0"]])
    }

    @Test(arguments: StoreKind.allCases) func anAnswerForALeaseThatExpiredAndWasTakenOverChangesNothing(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let a = try db.device(1)
        try db.enqueue(a, "a1")
        let stale = try #require(try db.claim("w1", lease: .seconds(60)).first)
        #expect(try db.store.rescueExpiredLeases(now: t0 + 59_999) == 0)
        #expect(try db.store.rescueExpiredLeases(now: t0 + 60_000) == 1)
        let fresh = try #require(try db.claim("w2", at: t0 + 60_000).first)
        #expect(fresh.id == stale.id && fresh.attempt == 2)
        #expect(try db.store.finish([.delivered(stale)], worker: "w1", now: t0 + 60_001) == [false])
        // Even the same worker answering for the older attempt is ignored.
        let olderAttempt = JobOutcome(stale, kind: .delivered)
        #expect(try db.store.finish([olderAttempt], worker: "w2", now: t0 + 60_001) == [false])
        #expect(try db.store.liveJobCount() == 1)
        #expect(try db.store.finish([.delivered(fresh)], worker: "w2", now: t0 + 60_002) == [true])
    }

    @Test(arguments: StoreKind.allCases) func aBatchWhoseDeviceVanishedStoresTheRestAndSaysWhich(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let a = try db.device(1)
        let results = try db.store.enqueue(
            [
                NewJob(deviceID: a, publicID: "p1", payload: [1]),
                NewJob(deviceID: "GoneGoneGone__", publicID: "p2", payload: [2]),
                NewJob(deviceID: a, publicID: "p3", payload: [3])
            ], now: t0, ttl: .seconds(60))
        #expect(results == [.queued, .deviceGone, .queued])
        #expect(try db.store.liveJobCount() == 2)
    }

    @Test(arguments: StoreKind.allCases) func releasedJobsAreDueAtOnceWithoutSpendingAnAttempt(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let a = try db.device(1)
        try db.enqueue(a, "a1")
        let job = try #require(try db.claim("w1").first)
        #expect(try db.store.release(jobIDs: [job.id], worker: "other", now: t0) == 0)
        #expect(try db.store.release(jobIDs: [job.id], worker: "w1", now: t0 + 5) == 1)
        let again = try #require(try db.claim("w2", at: t0 + 5).first)
        #expect(again.id == job.id && again.attempt == 1)
    }

    @Test(arguments: StoreKind.allCases) func makeRetryableDueSendsTheBacklogWithoutWaitingOutBackoff(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let a = try db.device(1)
        let b = try db.device(2)
        try db.enqueue(a, "a1")
        try db.enqueue(b, "b1")
        let jobs = try db.claim()
        _ = try db.store.finish(jobs.map { .retry($0, at: t0 + 300_000) }, worker: "w1", now: t0)
        #expect(try db.claim(at: t0 + 10).isEmpty)
        #expect(try db.store.makeRetryableDue(now: t0 + 10) == 2)
        #expect(try db.claim(at: t0 + 10).count == 2)
    }

    /// A Test request waiting behind its device's head (the head in flight): when APNs' 410 for the head removes the
    /// device, the request is answered 410 at once (SPEC §2.2 "just now for a waiting Test request"), and when the
    /// app deletes the device it is told the push was not delivered — never "queued" at TEST_WAIT for a push that
    /// went with its device.
    @Test(arguments: StoreKind.allCases) func aTestJobThatGoesWithItsDeviceHasAnOutcome(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let (unregistered, deleted) = (try db.device(1), try db.device(2))
        func testJob(_ device: String) -> NewJob {
            NewJob(deviceID: device, publicID: UUID().uuidString, payload: Array("test".utf8), reportsOutcome: true)
        }
        let waiting = [testJob(unregistered), testJob(deleted)]
        try db.enqueue(unregistered, "head")
        try db.enqueue(deleted, "head")
        _ = try db.store.enqueue(waiting, now: t0, ttl: .seconds(3600))
        let heads = try db.claim()
        let head = try #require(heads.first { $0.deviceID == unregistered })
        #expect(try db.store.finish([JobOutcome(head, kind: .removeDevice(reason: "Unregistered"))], worker: "w1", now: t0) == [true])
        #expect(try db.store.reportedOutcome(publicID: waiting[0].publicID) == ReportedOutcome(kind: .unregistered, reason: "Unregistered"))

        #expect(try db.store.deleteDevice(id: deleted, now: t0))
        #expect(try db.store.reportedOutcome(publicID: waiting[1].publicID) == ReportedOutcome(kind: .failed, reason: "DeviceDeleted"))
    }

    /// An outage probe with nothing due takes the retry that comes soonest — never a push postponed for its device's
    /// digest window, which is not waiting on APNs.
    @Test(arguments: StoreKind.allCases) func makeNextRetryDueMovesOnlyTheSoonestRetry(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let (a, b, c) = (try db.device(1), try db.device(2), try db.device(3))
        try db.enqueue(a, "a1")
        try db.enqueue(b, "b1")
        try db.enqueue(c, "c1")
        let jobs = try db.claim()
        let byDevice = Dictionary(uniqueKeysWithValues: jobs.map { ($0.deviceID, $0) })
        _ = try db.store.finish(
            [
                .retry(try #require(byDevice[a]), at: t0 + 300_000), .retry(try #require(byDevice[b]), at: t0 + 100_000),
                JobOutcome(try #require(byDevice[c]), kind: .postpone(until: t0 + 50_000))
            ], worker: "w1", now: t0)
        #expect(try db.claim(at: t0 + 10).isEmpty)

        #expect(try db.store.makeNextRetryDue(now: t0 + 10))
        #expect(try db.claim(at: t0 + 10).map(\.deviceID) == [b])
        #expect(try db.store.makeNextRetryDue(now: t0 + 10))
        #expect(try db.claim(at: t0 + 10).map(\.deviceID) == [a])
        #expect(try db.store.makeNextRetryDue(now: t0 + 10) == false, "the postponed push waits for its window")
        #expect(try db.claim(at: t0 + 50_000).map(\.deviceID) == [c])
    }

    /// `replay` pages through the dead letters by id, and a requeued one gets a new, larger id: dead-lettered again by a
    /// running deliverer before the replay's next page, it matched that page too and went out once more. The replay now
    /// stops at the last dead letter there was when it began (`replayAllDeadLetters`, which `replay` runs).
    @Test(arguments: StoreKind.allCases) func aReplayDoesNotReachTheDeadLettersItMadeItself(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        for seed in 1...2 { try db.enqueue(try db.device(seed), "first-\(seed)") }
        let claimed = try db.claim()
        _ = try db.store.finish(claimed.map { .dead($0, "BadDeviceToken") }, worker: "w1", now: t0 + 100)

        var pages = 0
        let replay = try db.store.replayAllDeadLetters(
            DeadLetterFilter(reason: "BadDeviceToken"), pageSize: 1, now: { t0 + 200 }, ttl: .seconds(60), deviceCap: 1000,
            afterPage: { _ in
                pages += 1
                // Meanwhile the deliverer takes the requeued push and APNs refuses it again (for a few pages only: a
                // replay that did reach them would otherwise never end).
                guard pages <= 4 else { return }
                let again = try? db.claim(at: t0 + 200)
                _ = try? db.store.finish((again ?? []).map { .dead($0, "BadDeviceToken") }, worker: "w1", now: t0 + 201)
            })
        #expect(replay.replayed == 2 && pages == 2, "each dead letter replayed once")
        #expect(try db.store.countDeadLetters(DeadLetterFilter(reason: "BadDeviceToken")) == 2)
        let none = try db.store.replayAllDeadLetters(
            DeadLetterFilter(reason: "Expired"), pageSize: 1, now: { t0 }, ttl: .seconds(60), deviceCap: 1000)
        #expect(none.replayed == 0 && none.lastExamined == nil)
    }

    @Test(arguments: StoreKind.allCases) func replayRequeuesMatchingDeadLettersBehindWhatIsQueued(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let a = try db.device(1)
        let b = try db.device(2)
        try db.enqueue(a, "a1")
        try db.enqueue(b, "b1")
        let first = try db.claim()
        _ = try db.store.finish([.dead(first[0], "BadDeviceToken"), .dead(first[1], "Expired")], worker: "w1", now: t0 + 100)
        try db.enqueue(a, "a2", "a3")

        #expect(try db.store.countDeadLetters(DeadLetterFilter(reason: "BadDeviceToken")) == 1)
        #expect(try db.store.countDeadLetters(DeadLetterFilter(deviceID: b)) == 1)
        #expect(try db.store.countDeadLetters(DeadLetterFilter(since: t0 + 101)) == 0)
        #expect(try db.store.countDeadLetters(DeadLetterFilter(since: t0 + 100)) == 2)

        #expect(try db.store.replayDeadLetters(DeadLetterFilter(reason: "BadDeviceToken"), limit: 10, now: t0 + 200, ttl: .seconds(60)) == 1)
        #expect(try db.store.countDeadLetters(DeadLetterFilter()) == 1)
        // a2 and a3 were queued first; the replayed a1 waits behind both (as `replay --help` says) with a fresh
        // attempt count and TTL.
        let heads = try db.claim(at: t0 + 200)
        #expect(heads.map(\.label) == ["a2"])
        _ = try db.store.finish([.delivered(heads[0])], worker: "w1", now: t0 + 201)
        let next = try db.claim(at: t0 + 201)
        #expect(next.map(\.label) == ["a3"], "the newer job keeps its place ahead of the replayed one")
        _ = try db.store.finish([.delivered(next[0])], worker: "w1", now: t0 + 201)
        let replayed = try #require(try db.claim(at: t0 + 201).first)
        #expect(replayed.label == "a1" && replayed.attempt == 1 && replayed.expiresAt == t0 + 200 + 60_000)
    }

    /// Issue 13: a token that dead-letters everything cannot fill the disk: past the budget, oldest go first.
    @Test(arguments: StoreKind.allCases) func deadLettersOverTheBudgetArePurgedOldestFirst(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let a = try db.device(1)
        for n in 0..<5 {
            try db.enqueue(a, "d\(n)")
            let head = try #require(try db.claim().first)
            _ = try db.store.finish([.dead(head, "BadDeviceToken")], worker: "w1", now: t0 + Int64(n))
        }
        #expect(try db.store.purgeDeadLetters(keeping: 2) == 3)
        #expect(try db.store.purgeDeadLetters(keeping: 2) == 0)
        #expect(try db.store.replayDeadLetters(DeadLetterFilter(), limit: 10, now: t0 + 10, ttl: .seconds(60)) == 2)
        #expect(try db.claim(at: t0 + 10).map(\.label) == ["d3"], "the two newest were kept")
    }

    @Test(arguments: StoreKind.allCases) func deadLettersArePurgedAfterRetention(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let a = try db.device(1)
        try db.enqueue(a, "a1")
        let job = try #require(try db.claim().first)
        _ = try db.store.finish([.dead(job, "Expired")], worker: "w1", now: t0 + 1000)
        #expect(try db.store.purgeDeadLetters(before: t0 + 1000) == 0)
        #expect(try db.store.purgeDeadLetters(before: t0 + 1001) == 1)
        #expect(try db.store.countDeadLetters(DeadLetterFilter()) == 0)
    }

    @Test(arguments: StoreKind.allCases) func statsCountDevicesJobsByStateDeadLettersAndOldestAge(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let a = try db.device(1)
        let b = try db.device(2)
        try db.enqueue(a, "a1", "a2", now: t0 + 10)
        try db.enqueue(b, "b1", now: t0 + 20)
        let jobs = try db.claim(at: t0 + 30)
        _ = try db.store.finish([.dead(jobs[1], "BadDeviceToken")], worker: "w1", now: t0 + 40)
        let stats = try db.store.stats()
        #expect(stats.devices == 2 && stats.tombstones == 0)
        #expect(stats.jobsByState == [.pending: 1, .running: 1, .discarded: 1])
        #expect(stats.deadLettersByReason == ["BadDeviceToken": 1])
        #expect(stats.oldestJobCreatedAt == t0 + 10)
    }

    @Test(arguments: StoreKind.allCases) func claimPicksTheLongestWaitingFirstAndHonoursTheLimit(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        for seed in 1...5 {
            try db.enqueue(try db.device(seed), "d\(seed)", now: t0 + Int64(10 - seed))
        }
        #expect(try db.claim(limit: 2, at: t0 + 100).map(\.label).sorted() == ["d4", "d5"], "the two that waited longest, in any order")
        #expect(try db.claim(limit: 0).isEmpty)
    }

    @Test(arguments: StoreKind.allCases) func aPostponedHeadWaitsWithoutSpendingAnAttemptAndStillBlocksItsDevice(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let a = try db.device(1)
        try db.enqueue(a, "a1", "a2")
        let head = try #require(try db.claim().first)
        #expect(
            try db.store.finish(
                [JobOutcome(head, kind: .postpone(until: t0 + 5000))],
                worker: "w1", now: t0) == [true])
        #expect(try db.claim(at: t0 + 4999).isEmpty, "neither the head nor the job behind it")
        let again = try #require(try db.claim(at: t0 + 5000).first)
        #expect(again.id == head.id && again.attempt == 1)
    }

    @Test(arguments: StoreKind.allCases) func jobsMergedIntoADigestCompleteWithIt(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let a = try db.device(1)
        try db.enqueue(a, "a1", "a2", "a3", "a4")
        let head = try #require(try db.claim().first)
        let pending = try db.store.pendingJobs(deviceID: a, limit: 2)
        #expect(pending.map { String(decoding: $0.payload, as: UTF8.self) } == ["a2", "a3"])
        _ = try db.store.finish(
            [JobOutcome(head, kind: .delivered, merged: pending.map(\.asMerged))],
            worker: "w1", now: t0)
        #expect(try db.claim().map(\.label) == ["a4"], "a4 was not merged: it is next, in order")
    }

    @Test(arguments: StoreKind.allCases) func jobsMergedIntoARejectedDigestAreDeadLetteredWithIt(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let a = try db.device(1)
        try db.enqueue(a, "a1", "a2", "a3")
        let head = try #require(try db.claim().first)
        let pending = try db.store.pendingJobs(deviceID: a, limit: 10)
        _ = try db.store.finish(
            [
                JobOutcome(
                    head, kind: .deadLetter(reason: "BadDeviceToken"),
                    merged: pending.map(\.asMerged))
            ], worker: "w1", now: t0)
        #expect(try db.store.countDeadLetters(DeadLetterFilter(reason: "BadDeviceToken")) == 3)
        #expect(try db.store.liveJobCount() == 0)
    }

    /// SPEC §3 alert storms with several deliverers (issue 15): the pushes a device got in the last minute are
    /// counted in the database, so a claim by any worker sees the count of every worker's deliveries.
    @Test(arguments: StoreKind.allCases) func everyWorkerSeesADevicesRecentPushes(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let a = try db.device(1)
        try db.enqueue(a, "a1", "a2", "a3", "a4")
        for (index, worker) in ["w1", "w2", "w1"].enumerated() {
            let head = try #require(try db.store.claim(worker: worker, limit: 10, now: t0 + Int64(index), lease: .seconds(60)).first)
            #expect(head.recentPushes == index, "pushes before this one, whoever sent them")
            _ = try db.store.finish([.delivered(head)], worker: worker, now: t0 + Int64(index))
        }
        let fourth = try #require(try db.store.claim(worker: "w2", limit: 10, now: t0 + 10, lease: .seconds(60)).first)
        #expect(fourth.recentPushes == 3 && fourth.lastPushAt == t0 + 2)
        _ = try db.store.release(jobIDs: [fourth.id], worker: "w2", now: t0 + 10)
        let later = try #require(try db.store.claim(worker: "w2", limit: 10, now: t0 + 60_001, lease: .seconds(60)).first)
        #expect(later.recentPushes == 0, "a minute later the window has passed")
    }
}
