import Common
import Foundation
import Queue
import TestSupport
import Testing

/// SPEC §2.4: a device holds at most DEVICE_QUEUE_MAX live jobs; alerts beyond it are acknowledged and folded into
/// its newest waiting job, never dropped and never growing the queue.
@Suite struct DeviceCapTests {
    let t0 = TestDatabase.t0

    func alert(_ device: String, _ monitor: Int, _ status: AlertEvent.Status = .down, test: Bool = false) -> NewJob {
        let event =
            test
            ? AlertEvent.test("test \(monitor)")
            : AlertEvent(kind: .monitor, status: status, monitorID: monitor, monitorName: "M\(monitor)", message: "msg \(monitor)")
        return NewJob(deviceID: device, publicID: UUID().uuidString, payload: event.jobPayload, reportsOutcome: test)
    }

    func pending(_ db: TestDatabase, _ device: String) throws -> [PendingJob] { try db.store.pendingJobs(deviceID: device, limit: 10_000) }

    @Test(arguments: StoreKind.allCases) func alertsPastTheCapFoldIntoTheNewestWaitingJob(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let device = try db.device(1)
        let results = try db.store.enqueue((1...7).map { alert(device, $0) }, now: t0, ttl: .seconds(60), deviceCap: 3)
        #expect(results == [.queued, .queued, .queued, .merged, .merged, .merged, .merged])
        #expect(try db.store.liveJobCount() == 3)
        let tail = try #require(try pending(db, device).last)
        #expect(AlertEvent(jobPayload: tail.payload)?.monitorName == "M3")
        #expect(tail.folded.count == 4)
        #expect(tail.folded.entries.map(\.name) == ["M4", "M5", "M6", "M7"], "in order, with the monitor and its state")
        #expect(tail.folded.entries.allSatisfy { $0.status == .down && $0.kind == .monitor })
    }

    /// Names of the alerts one push shows: its own and those folded into it.
    func shown(_ payload: [UInt8], _ folded: FoldedAlerts) -> [String] {
        [AlertEvent(jobPayload: payload)?.monitorName ?? "?"] + folded.entries.map(\.name)
    }

    /// At the cap, a digest leaves the device's newest waiting job out (`DigestCarry`): alerts arriving while it is
    /// in flight fold into that job, the device never holds more than its cap, and every alert is shown once, by the
    /// digest or by the push after it.
    @Test(arguments: StoreKind.allCases) func atTheCapAlertsDuringADigestFoldIntoTheJobItLeavesOut(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let device = try db.device(1)
        #expect(try db.store.enqueue((1...4).map { alert(device, $0) }, now: t0, ttl: .seconds(60), deviceCap: 3).last == .merged)
        let head = try #require(try db.claim().first)
        let carried = try db.store.carryBacklog(deviceID: device, limit: 10, minimum: 0, deviceCap: 3)
        #expect(carried.map { AlertEvent(jobPayload: $0.payload)?.monitorName } == ["M2"], "M3, with M4 folded in, left out")
        for monitor in 5...7 {
            #expect(try db.store.enqueue([alert(device, monitor)], now: t0, ttl: .seconds(60), deviceCap: 3) == [.merged])
            #expect(try db.store.liveJobCount() == 3, "never past the cap")
        }
        _ = try db.store.finish([JobOutcome(head, kind: .delivered, merged: carried.map(\.asMerged))], worker: "w1", now: t0)
        #expect(try db.store.liveJobCount() == 1, "every job the digest carried settled with it")
        let next = try #require(try db.claim().first)
        _ = try db.store.finish([JobOutcome(next, kind: .delivered)], worker: "w1", now: t0)
        #expect(try db.store.liveJobCount() == 0)
        let digest = shown(head.payload, head.folded) + carried.flatMap { shown($0.payload, $0.folded) }
        #expect(digest + shown(next.payload, next.folded) == (1...7).map { "M\($0)" }, "seven alerts sent, each shown once")
    }

    /// One below the cap, a digest leaves the newest waiting job out too: a Test request may take the last place,
    /// and the alert after it folds into that job rather than past the cap.
    @Test(arguments: StoreKind.allCases) func aTestTakingTheLastPlaceDuringADigestLeavesTheCapWhole(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let device = try db.device(1)
        _ = try db.store.enqueue((1...2).map { alert(device, $0) }, now: t0, ttl: .seconds(60), deviceCap: 3)
        _ = try #require(try db.claim().first)
        #expect(try db.store.carryBacklog(deviceID: device, limit: 10, minimum: 0, deviceCap: 3).isEmpty, "M2 left out")
        #expect(try db.store.enqueue([alert(device, 3, test: true)], now: t0, ttl: .seconds(60), deviceCap: 3) == [.queued])
        #expect(try db.store.enqueue([alert(device, 4)], now: t0, ttl: .seconds(60), deviceCap: 3) == [.merged])
        #expect(try db.store.liveJobCount() == 3, "never past the cap")
        #expect(try pending(db, device).first?.folded.entries.map(\.name) == ["M4"], "folded into M2's job")
    }

    /// The safety net, for a deliverer on a larger DEVICE_QUEUE_MAX than ingest's (here none: it never leaves the
    /// newest waiting job out). Alerts arriving while its digest is in flight are not folded into the jobs it carries
    /// (sealed), but into a job of their own past the cap. The digest's jobs all settle with it, and every alert is
    /// shown once: folded into a carried job, an alert left that job behind to go out again with the alerts the
    /// digest had already shown.
    @Test(arguments: StoreKind.allCases) func alertsArrivingWhileADigestIsInFlightAreShownOnce(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let device = try db.device(1)
        _ = try db.store.enqueue((1...4).map { alert(device, $0) }, now: t0, ttl: .seconds(60), deviceCap: 3)
        let head = try #require(try db.claim().first)
        let carried = try db.store.carryBacklog(deviceID: device, limit: 10, minimum: 0, deviceCap: .max)
        #expect(carried.map { AlertEvent(jobPayload: $0.payload)?.monitorName } == ["M2", "M3"])
        let shown = 1 + carried.reduce(0) { $0 + 1 + $1.folded.count }
        #expect(shown == 4, "M1, M2, M3 and M4 folded into M3")
        let meanwhile = try db.store.enqueue([alert(device, 5), alert(device, 6)], now: t0, ttl: .seconds(60), deviceCap: 3)
        #expect(meanwhile == [.queued, .merged])
        #expect(try db.store.liveJobCount() == 4, "the cap plus one job while the digest is in flight")
        _ = try db.store.finish([JobOutcome(head, kind: .delivered, merged: carried.map(\.asMerged))], worker: "w1", now: t0)
        #expect(try db.store.liveJobCount() == 1, "every job the digest carried settled with it")
        let next = try #require(try db.claim().first)
        #expect(AlertEvent(jobPayload: next.payload)?.monitorName == "M5")
        #expect(next.folded.entries.map(\.name) == ["M6"])
        #expect(shown + 1 + next.folded.count == 6, "six alerts sent, six shown")
    }

    /// The safety net again (a deliverer on a larger cap): a digest that waits for a retry keeps its jobs sealed and,
    /// attempted again, carries the same jobs: not the job ingest added past the cap meanwhile, which stays open for
    /// the next alerts (the device never passes its cap plus one).
    @Test(arguments: StoreKind.allCases) func aRetriedDigestCarriesWhatItCarriedBefore(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let device = try db.device(1)
        _ = try db.store.enqueue((1...3).map { alert(device, $0) }, now: t0, ttl: .seconds(60), deviceCap: 3)
        let head = try #require(try db.claim().first)
        let carried = try db.store.carryBacklog(deviceID: device, limit: 10, minimum: 0, deviceCap: .max)
        _ = try db.store.enqueue([alert(device, 4)], now: t0, ttl: .seconds(60), deviceCap: 3)
        _ = try db.store.finish([.retry(head, at: t0 + 1000)], worker: "w1", now: t0)
        let again = try #require(try db.claim(at: t0 + 1000).first)
        #expect(again.id == head.id)
        #expect(try db.store.carryBacklog(deviceID: device, limit: 10, minimum: 0, deviceCap: .max) == carried)
        #expect(try db.store.enqueue([alert(device, 5)], now: t0, ttl: .seconds(60), deviceCap: 3) == [.merged])
        #expect(try db.store.liveJobCount() == 4)
        #expect(try pending(db, device).last?.folded.entries.map(\.name) == ["M5"], "folded into M4's job")
    }

    /// At the cap, a retried digest carries what it carried the first time, and the job it left out keeps taking
    /// alerts: the device stays at its cap through the retry.
    @Test(arguments: StoreKind.allCases) func atTheCapARetriedDigestCarriesWhatItCarriedBefore(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let device = try db.device(1)
        _ = try db.store.enqueue((1...3).map { alert(device, $0) }, now: t0, ttl: .seconds(60), deviceCap: 3)
        let head = try #require(try db.claim().first)
        let carried = try db.store.carryBacklog(deviceID: device, limit: 10, minimum: 0, deviceCap: 3)
        #expect(carried.map { AlertEvent(jobPayload: $0.payload)?.monitorName } == ["M2"])
        #expect(try db.store.enqueue([alert(device, 4)], now: t0, ttl: .seconds(60), deviceCap: 3) == [.merged])
        _ = try db.store.finish([.retry(head, at: t0 + 1000)], worker: "w1", now: t0)
        _ = try #require(try db.claim(at: t0 + 1000).first)
        #expect(try db.store.carryBacklog(deviceID: device, limit: 10, minimum: 0, deviceCap: 3) == carried)
        #expect(try db.store.enqueue([alert(device, 5)], now: t0, ttl: .seconds(60), deviceCap: 3) == [.merged])
        #expect(try db.store.liveJobCount() == 3)
        #expect(try pending(db, device).last?.folded.entries.map(\.name) == ["M4", "M5"], "folded into M3's job")
    }

    /// An alert folded into an older job is kept for its own JOB_TTL: the job it joined lives that long (its push
    /// asks APNs for it, and it is not dead-lettered as expired before then). Each job reports its expiry to the
    /// digest that merges it.
    @Test(arguments: StoreKind.allCases) func aFoldedAlertKeepsItsJobAliveForItsOwnTTL(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let device = try db.device(1)
        let hour: Int64 = 3_600_000
        _ = try db.store.enqueue((1...2).map { alert(device, $0) }, now: t0, ttl: .seconds(3600), deviceCap: 2)
        #expect(try pending(db, device).map(\.expiresAt) == [t0 + hour])
        let later = t0 + hour / 2
        #expect(try db.store.enqueue([alert(device, 3)], now: later, ttl: .seconds(3600), deviceCap: 2) == [.merged])
        #expect(try pending(db, device).map(\.expiresAt) == [later + hour])
        let claimed = try db.claim(at: later)
        #expect(claimed.map(\.expiresAt) == [t0 + hour], "the head it was not folded into keeps its own")
    }

    @Test(arguments: StoreKind.allCases) func otherDevicesAndTestButtonJobsAreNeverFolded(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let stormy = try db.device(1)
        let calm = try db.device(2)
        _ = try db.store.enqueue((1...2).map { alert(stormy, $0) } + [alert(stormy, 9, test: true)], now: t0, ttl: .seconds(60), deviceCap: 3)
        let results = try db.store.enqueue([alert(calm, 1), alert(stormy, 10)], now: t0, ttl: .seconds(60), deviceCap: 3)
        #expect(results == [.queued, .merged])
        let tail = try #require(try pending(db, stormy).last(where: { !$0.reportsOutcome }))
        #expect(tail.folded.entries.map(\.name) == ["M10"], "folded past the Test job, into the newest alert job")
    }

    /// SPEC §4: the cap holds for Test-shaped webhooks too. A Test request past the cap is folded like an alert
    /// (answered 202 "merged" at once, never waiting), not stored past the cap as it was.
    @Test(arguments: StoreKind.allCases) func aTestPastTheCapIsFoldedNotStored(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let device = try db.device(1)
        _ = try db.store.enqueue((1...3).map { alert(device, $0) }, now: t0, ttl: .seconds(60), deviceCap: 3)
        #expect(try db.store.enqueue([alert(device, 4, test: true)], now: t0, ttl: .seconds(60), deviceCap: 3) == [.merged])
        #expect(try db.store.liveJobCount() == 3)
        #expect(try pending(db, device).last?.folded.count == 1)
    }

    /// The Test button pressed again and again while its first push waits (an APNs outage) stores nothing more:
    /// each request is answered with the waiting job's id, in one batch or across many.
    @Test(arguments: StoreKind.allCases) func theTestButtonPressedAgainWhileItsPushWaitsStoresNothing(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let device = try db.device(1)
        let first = alert(device, 1, test: true)
        let again = { NewJob(deviceID: device, publicID: UUID().uuidString, payload: first.payload, reportsOutcome: true) }
        let batch = try db.store.enqueue([alert(device, 7), first, again()], now: t0, ttl: .seconds(60), deviceCap: 20)
        #expect(batch == [.queued, .queued, .sameAsWaitingTest(publicID: first.publicID)])
        for _ in 0..<30 {
            #expect(try db.store.enqueue([again()], now: t0, ttl: .seconds(60), deviceCap: 20) == [.sameAsWaitingTest(publicID: first.publicID)])
        }
        #expect(try db.store.liveJobCount() == 2)
        // Once the waiting Test job is delivered, the next press waits for its own push again.
        let heads = try db.claim()
        _ = try db.store.finish([.delivered(heads[0])], worker: "w1", now: t0)
        let second = try #require(try db.claim().first)
        #expect(second.publicID == first.publicID)
        _ = try db.store.finish([.delivered(second)], worker: "w1", now: t0)
        #expect(try db.store.enqueue([again()], now: t0, ttl: .seconds(60), deviceCap: 20) == [.queued])
    }

    /// A certificate-expiry notice has the Test button's shape but says something else: while a Test request waits
    /// it is kept as an alert (stored, not waiting, foldable), so no notice is lost.
    @Test(arguments: StoreKind.allCases) func aDifferentTestShapedNoticeWhileATestWaitsIsKeptAsAnAlert(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let device = try db.device(1)
        let results = try db.store.enqueue(
            [alert(device, 1, test: true), alert(device, 2, test: true), alert(device, 3)], now: t0, ttl: .seconds(60), deviceCap: 3)
        #expect(results == [.queued, .queuedAsAlert, .queued])
        #expect(try pending(db, device).map(\.reportsOutcome) == [false, false], "only the first waits for its outcome")
        #expect(try db.store.enqueue([alert(device, 4, test: true)], now: t0, ttl: .seconds(60), deviceCap: 3) == [.merged])
    }

    /// With nothing to fold into (a cap of one: the head alone), an alert past the cap is refused for its device
    /// only — never stored past the cap — and other devices' alerts are stored as usual.
    @Test(arguments: StoreKind.allCases) func anAlertPastTheCapWithNothingToFoldIntoIsRefusedForThatDeviceOnly(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let full = try db.device(1)
        let other = try db.device(2)
        let results = try db.store.enqueue(
            [alert(full, 1), alert(full, 2), alert(other, 1), alert(full, 3, test: true)], now: t0, ttl: .seconds(60), deviceCap: 1)
        #expect(results == [.queued, .deviceFull, .queued, .deviceFull])
        #expect(try db.store.liveJobCount() == 2)
    }

    /// A replay never takes a device past its cap either: a dead letter of a full device stays one, is counted as
    /// left, and the next replay after the device drained puts it back (as an alert: no Test request waits for it).
    @Test(arguments: StoreKind.allCases) func aReplayLeavesTheDeadLettersOfAFullDeviceForLater(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let device = try db.device(1)
        _ = try db.store.enqueue([alert(device, 1, test: true), alert(device, 2)], now: t0, ttl: .seconds(60), deviceCap: 3)
        let head = try #require(try db.claim().first)
        _ = try db.store.finish([.dead(head, "BadDeviceToken")], worker: "w1", now: t0)
        _ = try db.store.enqueue([alert(device, 3), alert(device, 4)], now: t0, ttl: .seconds(60), deviceCap: 3)
        #expect(
            try db.store.replayDeadLetters(DeadLetterFilter(), limit: 10, now: t0, ttl: .seconds(60), deviceCap: 3)
                == ReplayBatch(replayed: 0, leftAtCap: 1, lastExamined: head.id))
        #expect(try db.store.countDeadLetters(DeadLetterFilter()) == 1)
        #expect(try db.store.liveJobCount() == 3)
        let next = try #require(try db.claim().first)
        _ = try db.store.finish([.delivered(next)], worker: "w1", now: t0)
        #expect(try db.store.replayDeadLetters(DeadLetterFilter(), limit: 10, now: t0, ttl: .seconds(60), deviceCap: 3).replayed == 1)
        #expect(try db.store.liveJobCount() == 3)
        #expect(try pending(db, device).last?.reportsOutcome == false, "no Test request waits for a replayed job")
    }

    @Test(arguments: StoreKind.allCases) func storageStaysBoundedHoweverLongTheStormLasts(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let device = try db.device(1)
        for round in 0..<10 {
            _ = try db.store.enqueue(
                (0..<500).map { alert(device, round * 500 + $0, $0 % 3 == 0 ? .up : .down) },
                now: t0, ttl: .seconds(60), deviceCap: 10)
        }
        #expect(try db.store.liveJobCount() == 10)
        let tail = try #require(try pending(db, device).last)
        #expect(tail.folded.count == 5_000 - 10, "every alert past the cap is counted")
        #expect(tail.folded.encoded.count < 4096, "names kept while they fit a small budget, then only counted")
        var tally = tail.folded.uncounted
        for entry in tail.folded.entries { tally.add(entry.status) }
        #expect(tally.up + tally.down == 4_990)
    }

    /// A digest read the tail with N folded alerts; ingest folded one more before the digest completed. The tail
    /// must survive the completion so the alert folded later still reaches the phone.
    @Test(arguments: StoreKind.allCases) func aJobThatGainedFoldedAlertsAfterTheDigestReadItIsNotCompletedWithIt(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let device = try db.device(1)
        _ = try db.store.enqueue((1...4).map { alert(device, $0) }, now: t0, ttl: .seconds(60), deviceCap: 3)
        let head = try #require(try db.store.claim(worker: "w1", limit: 10, now: t0, lease: .seconds(60)).first)
        let read = try pending(db, device)
        #expect(read.map(\.folded.count) == [0, 1])
        #expect(try db.store.enqueue([alert(device, 5)], now: t0, ttl: .seconds(60), deviceCap: 3) == [.merged])
        _ = try db.store.finish(
            [JobOutcome(head, kind: .delivered, merged: read.map(\.asMerged))],
            worker: "w1", now: t0)
        let left =
            try pending(db, device)
            + db.store.claim(worker: "w1", limit: 10, now: t0, lease: .seconds(60)).map {
                PendingJob(id: $0.id, payload: $0.payload, createdAt: $0.createdAt, folded: $0.folded, expiresAt: $0.expiresAt)
            }
        #expect(left.count == 1, "the untouched tail is the device's next job")
        #expect(left.first?.folded.entries.map(\.name) == ["M4", "M5"])
    }

    /// A device's count left high (by a deliverer older than schema 11 that kept running through the upgrade) would
    /// fold its alerts for good, and one left low (PostgreSQL: an older ingest host's jobs, uncounted) would let
    /// them past the cap; either is taken back to the truth when the device has no head, the next time it gets an
    /// alert.
    @Test(arguments: StoreKind.allCases, [5000, -3]) func aLiveCountLeftWrongHealsWhenTheDeviceIsIdle(_ kind: StoreKind, _ wrong: Int) throws {
        let db = try TestDatabase(kind)
        let a = try db.device(1)
        try kind.rawQuery(db.location, "UPDATE devices SET live_jobs = \(wrong) WHERE id = '\(a)'")
        #expect(try db.store.enqueue([alert(a, 1), alert(a, 2)], now: t0, ttl: .seconds(60), deviceCap: 4) == [.queued, .queued])
        #expect(try kind.rawQuery(db.location, "SELECT live_jobs FROM devices WHERE id = '\(a)'") == [["2"]])
    }

    /// The cap reads a count kept by the statements that add live jobs and those that end them (migration 11); it
    /// must agree with the jobs through every way a job comes and goes: enqueue, delivery, dead letter, abandon,
    /// a digest delivered or dead-lettered with the jobs merged into it, replay, device deletion.
    @Test(arguments: StoreKind.allCases) func theLiveJobCountTheCapReadsAgreesWithTheJobs(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let a = try db.device(1)
        let b = try db.device(2)
        func agree() throws -> Bool {
            try kind.rawQuery(
                db.location,
                """
                SELECT count(*) FROM devices d WHERE d.live_jobs !=
                    (SELECT count(*) FROM jobs j WHERE j.device_id = d.id AND j.state != 'discarded')
                """) == [["0"]]
        }
        _ = try db.store.enqueue((1...6).map { alert(a, $0) } + (1...3).map { alert(b, $0) }, now: t0, ttl: .seconds(60), deviceCap: 4)
        #expect(try agree())
        var heads = try db.store.claim(worker: "w", limit: 10, now: t0, lease: .seconds(60))
        _ = try db.store.finish([.delivered(heads[0]), .dead(heads[1], "BadDeviceToken")], worker: "w", now: t0)
        #expect(try agree())
        heads = try db.store.claim(worker: "w", limit: 10, now: t0, lease: .seconds(60))
        let merged = try pending(db, a).map(\.asMerged)
        _ = try db.store.finish(
            [JobOutcome(heads[0], kind: .delivered, merged: merged)],
            worker: "w", now: t0)
        #expect(try agree())
        _ = try db.store.replayDeadLetters(DeadLetterFilter(), limit: 10, now: t0, ttl: .seconds(60))
        #expect(try agree())
        // A digest refused by APNs takes the jobs merged into it to the dead letters; an abandoned job leaves too.
        _ = try db.store.enqueue((7...12).map { alert(a, $0) }, now: t0, ttl: .seconds(60), deviceCap: 4)
        #expect(try agree())
        heads = try db.store.claim(worker: "w", limit: 10, now: t0, lease: .seconds(60))
        let head = try #require(heads.first { $0.deviceID == a })
        let waiting = try pending(db, a).map(\.asMerged)
        #expect(!waiting.isEmpty)
        _ = try db.store.finish([JobOutcome(head, kind: .deadLetter(reason: "PayloadTooLarge"), merged: waiting)], worker: "w", now: t0)
        #expect(try agree())
        _ = try db.store.enqueue([alert(a, 13)], now: t0, ttl: .seconds(60), deviceCap: 4)
        let last = try #require(try db.store.claim(worker: "w", limit: 10, now: t0, lease: .seconds(60)).first { $0.deviceID == a })
        _ = try db.store.finish([JobOutcome(last, kind: .abandon(reason: "expired"))], worker: "w", now: t0)
        #expect(try agree())
        _ = try db.store.deleteDevice(id: b, now: t0)
        #expect(try agree())
        #expect(try kind.rawQuery(db.location, "SELECT live_jobs FROM devices WHERE id = '\(a)'") == [["0"]])
    }

    /// `dead-letters list` says after how many attempts a push was given up. The alerts a refused digest carried were
    /// never claimed themselves (their count stayed 0): they take the attempts of the push that carried them.
    @Test(arguments: StoreKind.allCases) func alertsADigestCarriedToTheDeadLettersCountItsAttempts(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let device = try db.device(1)
        try db.enqueue(device, "head", "second", "third")
        let first = try #require(try db.claim().first)
        _ = try db.store.finish([.retry(first, at: t0)], worker: "w1", now: t0)
        let head = try #require(try db.claim(at: t0 + 1).first)
        #expect(head.attempt == 2)
        let carried = try db.store.pendingJobs(deviceID: device, limit: 10).map(\.asMerged)
        #expect(carried.count == 2)
        _ = try db.store.finish([JobOutcome(head, kind: .deadLetter(reason: "PayloadTooLarge"), merged: carried)], worker: "w1", now: t0 + 2)
        let support = try #require(db.store as? any SupportQueries)
        let letters = try support.listDeadLetters(DeadLetterFilter(), limit: 10)
        #expect(letters.map(\.attempts) == [2, 2, 2])
    }
}
