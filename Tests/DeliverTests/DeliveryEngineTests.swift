import Common
import Deliver
import Foundation
import Queue
import Simulator
import TestSupport
import Testing

/// The delivery engine against the in-process APNs simulator: real TLS, HTTP/2, JWT and SQLite.
@Suite struct DeliveryEngineTests {
    @Test func pushesArriveSignedAndShapedInPerDeviceOrder() throws {
        let h = try DeliveryHarness()
        defer { h.stop() }
        let devices = try (1...5).map { try h.device($0) }
        let enqueuedFrom = h.clock.nowMillis()
        for device in devices { try h.enqueue(device.id, (0..<20).map { "\($0)" }) }
        let enqueuedUntil = h.clock.nowMillis()
        #expect(try h.waitUntil { try h.store.liveJobCount() == 0 })
        for device in devices {
            #expect(h.acceptedBodies(device.token) == (0..<20).map { "\($0)" })
        }
        let push = try #require(h.simulator.received.first)
        #expect(push.headers["apns-push-type"] == "alert" && push.headers["apns-priority"] == "10")
        #expect(push.headers["apns-topic"] == DeliveryHarness.topic)
        #expect(push.headers["apns-id"] == push.headers["apns-collapse-id"])
        // Acceptance time + JOB_TTL (3600 s here), in seconds: not 0, not milliseconds.
        let expiration = try #require(Int64(push.headers["apns-expiration"] ?? ""))
        #expect((enqueuedFrom / 1000 + 3600)...(enqueuedUntil / 1000 + 3600) ~= expiration)
        let stored = try #require(try h.store.device(id: devices[0].id))
        #expect(stored.lastSuccessfulNotification != nil && stored.lastDeliveryError == "")
        #expect(h.tokens.refreshes.load(ordering: .relaxed) == 1, "one provider token for everything")
    }

    @Test func unregisteredRemovesTheDeviceAndLeavesATombstone() throws {
        let h = try DeliveryHarness()
        defer { h.stop() }
        let device = try h.device(1)
        h.simulator.faults.withLock { $0.byToken[device.token] = .init(status: 410, reason: "Unregistered") }
        try h.enqueue(device.id, ["a", "b", "c"])
        #expect(try h.waitUntil { try h.store.device(id: device.id) == nil })
        #expect(try h.store.tombstone(deviceID: device.id)?.reason == "Unregistered")
        #expect(try h.store.liveJobCount() == 0)
    }

    /// A 410 answers the token the push went to. When the app registered a new token while the push was in flight
    /// (PATCH), the device stays (its webhook URL keeps working), it is not counted as removed, and the alert goes
    /// to the new token.
    @Test func unregisteredForATokenReplacedInFlightKeepsTheDeviceAndReachesTheNewToken() throws {
        let h = try DeliveryHarness()
        defer { h.stop() }
        let device = try h.device(40)
        h.simulator.faults.withLock {
            $0.byToken[device.token] = .init(status: 410, reason: "Unregistered")
            $0.latencyMillis = 300
        }
        try h.enqueue(device.id, ["alert"])
        let raw = try RawSQLite(path: h.directory.path("relay.db"))
        #expect(try h.waitUntil { try raw.query("SELECT attempted_at IS NOT NULL FROM jobs") == [["1"]] }, "claimed and sent")
        let newToken = String(repeating: "cd", count: 32)
        _ = try h.store.updateDevice(id: device.id, token: newToken, level: nil)
        #expect(h.waitUntil { h.acceptedBodies(newToken) == ["alert"] })
        #expect(try h.store.device(id: device.id) != nil && h.store.tombstone(deviceID: device.id) == nil)
        #expect(h.metrics.value("kumapush_devices_removed_total") == 0)
        #expect(h.simulator.received.filter { $0.token == device.token }.map(\.status) == [410], "the old token was tried once")
    }

    /// SQLite gives the id of a deleted newest job to the next one. A device deleted with its push in flight, and
    /// another device's alert accepted and sent before that push's answer came back: the late answer belongs to the
    /// deleted device's push, not to the job that now has its id. Taken for it, APNs' 200 for the deleted device
    /// recorded the other device's push as delivered, and its own 503 was then ignored: an alert lost.
    @Test func aLateAnswerForADeletedDevicesPushIsNotTakenForTheJobThatReusedItsID() throws {
        let h = try DeliveryHarness()
        defer { h.stop() }
        let (gone, kept) = (try h.device(41), try h.device(42))
        h.simulator.faults.withLock {
            $0.latencyMillis = 500
            $0.byToken[kept.token] = .init(status: 503, reason: "ServiceUnavailable")
        }
        let raw = try RawSQLite(path: h.directory.path("relay.db"))
        try h.enqueue(gone.id, ["to a device deleted in flight"])
        #expect(try h.waitUntil { try raw.query("SELECT attempted_at IS NOT NULL FROM jobs") == [["1"]] }, "claimed and sent")
        let reusedID = try raw.query("SELECT id FROM jobs")
        #expect(try h.store.deleteDevice(id: gone.id, now: h.clock.nowMillis()))
        try h.enqueue(kept.id, ["alert"])
        #expect(try raw.query("SELECT id FROM jobs") == reusedID, "the new job has the deleted one's id")
        #expect(try h.waitUntil { try raw.query("SELECT attempted_at IS NOT NULL FROM jobs") == [["1"]] }, "sent too")

        #expect(h.waitUntil { h.simulator.received.contains { $0.token == kept.token && $0.status == 503 } })
        h.simulator.faults.withLock { $0.byToken[kept.token] = nil }
        #expect(h.waitUntil { h.acceptedBodies(kept.token) == ["alert"] }, "the refused alert is sent again, not taken as delivered")
    }

    @Test func badDeviceTokenDeadLettersButKeepsTheDevice() throws {
        let h = try DeliveryHarness()
        defer { h.stop() }
        let device = try h.device(1)
        h.simulator.faults.withLock { $0.byToken[device.token] = .init(status: 400, reason: "BadDeviceToken") }
        try h.enqueue(device.id, ["a", "b"])
        #expect(try h.waitUntil { try h.store.countDeadLetters(DeadLetterFilter(reason: "BadDeviceToken")) == 2 })
        #expect(h.waitUntil { h.metrics.value("kumapush_dead_lettered_total") == 2 }, "the counter the dead-letter alert reads")
        let stored = try #require(try h.store.device(id: device.id))
        #expect(stored.lastDeliveryError == "BadDeviceToken")
    }

    /// Alerts that outlived JOB_TTL before a deliverer took them (an outage, deliverers stopped) are lost to the user:
    /// they count as dead letters in `kumapush_deliveries_total`, whose growth the shipped alert rule watches, though
    /// no request was sent.
    @Test func alertsThatExpiredWaitingCountAsDeadLetters() throws {
        let h = try DeliveryHarness()
        defer { h.stop() }
        let device = try h.device(1)
        try h.enqueue(device.id, ["a", "b"], ttl: .seconds(3600), acceptedAgo: .seconds(7200))
        #expect(try h.waitUntil { try h.store.countDeadLetters(DeadLetterFilter(reason: "Expired")) == 2 })
        #expect(h.metrics.value("kumapush_deliveries_total", [("outcome", "dead_letter"), ("reason", "Expired")]) == 2)
        #expect(h.metrics.value("kumapush_dead_lettered_total") == 2)
        #expect(h.simulator.received.isEmpty, "nothing was sent")
    }

    /// SPEC §4 and §2.2: dead letters go after DEAD_LETTER_RETENTION (7 days) and tombstones after
    /// TOMBSTONE_RETENTION (30 days); a deliverer purges them when it starts and every ten minutes. Younger ones stay.
    @Test func aDelivererPurgesDeadLettersAndTombstonesPastTheirRetention() throws {
        let now = SystemClock().nowMillis()
        var planted: Result<PastRetention, any Error>?
        // Planted before the engine starts: one of each just past its retention, one just within it.
        let h = try DeliveryHarness(engineStore: { store in
            planted = Result { try PastRetention(plantedIn: store, now: now) }
            return store
        })
        defer { h.stop() }
        let seeds = try #require(planted).get()
        #expect(try h.waitUntil { try h.store.countDeadLetters(DeadLetterFilter(deviceID: seeds.oldDeadLetter)) == 0 }, "the old dead letter goes")
        #expect(try h.waitUntil { try h.store.tombstone(deviceID: seeds.oldTombstone) == nil }, "the old tombstone goes")
        #expect(try h.store.countDeadLetters(DeadLetterFilter(deviceID: seeds.youngDeadLetter)) == 1)
        #expect(try h.store.tombstone(deviceID: seeds.youngTombstone)?.reason == "DeletedByOperator")
    }

    /// Devices holding a dead letter 8 and 6 days old, and two devices erased 31 and 29 days ago.
    private struct PastRetention {
        let oldDeadLetter: String
        let youngDeadLetter: String
        let oldTombstone: String
        let youngTombstone: String
        static let day: Int64 = 86_400_000

        init(plantedIn store: SQLiteStore, now: Int64) throws {
            func device(_ seed: Int) throws -> String {
                try store.registerDevice(
                    token: String(format: "%064x", seed), authTokenHash: "h", now: now, newID: { try DeviceID.generate() }
                ).device.id
            }
            func deadLetter(agedDays days: Int64, seed: Int) throws -> String {
                let id = try device(seed)
                let at = now - days * Self.day
                let event = AlertEvent(kind: .monitor, status: .down, monitorID: 1, monitorName: "DB", message: "down")
                _ = try store.enqueue(
                    [NewJob(deviceID: id, publicID: UUID().uuidString.lowercased(), payload: event.jobPayload)], now: at, ttl: .seconds(3600))
                let claimed = try store.claim(worker: "earlier", limit: 1, now: at, lease: .seconds(60))
                _ = try store.finish(claimed.map { JobOutcome($0, kind: .deadLetter(reason: "BadDeviceToken")) }, worker: "earlier", now: at)
                return id
            }
            func erased(agedDays days: Int64, seed: Int) throws -> String {
                let id = try device(seed)
                _ = try store.eraseDevice(id: id, reason: "DeletedByOperator", now: now - days * Self.day)
                return id
            }
            oldDeadLetter = try deadLetter(agedDays: 8, seed: 801)
            youngDeadLetter = try deadLetter(agedDays: 6, seed: 802)
            oldTombstone = try erased(agedDays: 31, seed: 803)
            youngTombstone = try erased(agedDays: 29, seed: 804)
        }
    }

    @Test func testButtonOutcomesAreReported() throws {
        let h = try DeliveryHarness()
        defer { h.stop() }
        let good = try h.device(1)
        let bad = try h.device(2)
        h.simulator.faults.withLock { $0.byToken[bad.token] = .init(status: 400, reason: "DeviceTokenNotForTopic") }
        try h.enqueue(good.id, ["ok"], test: true)
        try h.enqueue(bad.id, ["nope"], test: true)
        #expect(try h.waitUntil { try h.store.liveJobCount() == 0 })
        let outcomes = h.simulator.received.map(\.apnsID).compactMap { try? h.store.reportedOutcome(publicID: $0) }
        #expect(Set(outcomes) == [ReportedOutcome(kind: .delivered), ReportedOutcome(kind: .rejected, reason: "DeviceTokenNotForTopic")])
    }

    /// SPEC §2.2's 502 rows, the deliverer's half: a configuration fault is written where every ingest process
    /// sees it (and withdrawn at shutdown); a Test push the relay gave up on is reported as failed, not rejected.
    @Test func configurationFaultsAndRelaySideFailuresAreReportedForTheTestButton() throws {
        let h = try DeliveryHarness()
        let device = try h.device(1)
        let late = NewJob(
            deviceID: device.id, publicID: UUID().uuidString.lowercased(), payload: AlertEvent.test("late").jobPayload,
            reportsOutcome: true)
        _ = try h.store.enqueue([late], now: h.clock.nowMillis() - 10_000, ttl: .seconds(1))
        h.engine.wake()
        #expect(h.waitUntil { (try? h.store.reportedOutcome(publicID: late.publicID)) == ReportedOutcome(kind: .failed, reason: "Expired") })

        h.simulator.faults.withLock { $0.byToken[device.token] = .init(status: 400, reason: "BadTopic") }
        try h.enqueue(device.id, ["x"])
        #expect(h.waitUntil { (try? h.store.currentPause(since: 0)) == "BadTopic" })
        h.stop()
        #expect(try h.store.currentPause(since: 0) == nil, "a deliverer that stopped no longer speaks for delivery")
    }

    @Test func aStreamLimitOf1StillDeliversEverythingInOrder() throws {
        let h = try DeliveryHarness(streams: 1, connections: 1)
        defer { h.stop() }
        let devices = try (1...4).map { try h.device($0) }
        for device in devices { try h.enqueue(device.id, (0..<10).map { "\($0)" }) }
        #expect(try h.waitUntil { try h.store.liveJobCount() == 0 })
        for device in devices { #expect(h.acceptedBodies(device.token) == (0..<10).map { "\($0)" }) }
    }

    @Test func goAwayMidBatchResendsOnANewConnectionAndLosesNothing() throws {
        let h = try DeliveryHarness(connections: 1)
        defer { h.stop() }
        let devices = try (1...20).map { try h.device($0) }
        h.simulator.faults.withLock { $0.goAwayAfter = 5 }
        for device in devices { try h.enqueue(device.id, ["0", "1", "2"]) }
        #expect(try h.waitUntil { try h.store.liveJobCount() == 0 })
        for device in devices { #expect(h.acceptedBodies(device.token) == ["0", "1", "2"]) }
        #expect(try h.store.countDeadLetters(DeadLetterFilter()) == 0)
    }

    @Test func aDroppedConnectionWithStreamsInFlightIsRetried() throws {
        let h = try DeliveryHarness(connections: 1)
        defer { h.stop() }
        let devices = try (1...10).map { try h.device($0) }
        h.simulator.faults.withLock { $0.dropNext = true }
        for device in devices { try h.enqueue(device.id, ["0", "1"]) }
        #expect(try h.waitUntil { try h.store.liveJobCount() == 0 })
        // At least once: a push whose answer was lost with the connection may arrive twice, but only right after
        // itself — never out of order.
        for device in devices {
            let bodies = h.acceptedBodies(device.token)
            let deduplicated = bodies.enumerated().filter { $0.offset == 0 || bodies[$0.offset - 1] != $0.element }.map(\.element)
            #expect(deduplicated == ["0", "1"], "\(bodies)")
        }
        #expect(try h.store.countDeadLetters(DeadLetterFilter()) == 0)
    }

    @Test func aServerThatNeverAnswersTimesOutAndTheJobIsRetried() throws {
        let h = try DeliveryHarness(connections: 1, requestTimeout: .milliseconds(300))
        defer { h.stop() }
        let device = try h.device(1)
        h.simulator.faults.withLock { $0.silent = true }
        try h.enqueue(device.id, ["late"])
        #expect(h.waitUntil { h.metrics.value("kumapush_deliveries_total", [("outcome", "retry"), ("reason", "Timeout")]) >= 1 })
        h.simulator.faults.withLock { $0.silent = false }
        #expect(try h.waitUntil { try h.store.liveJobCount() == 0 })
        #expect(h.acceptedBodies(device.token) == ["late"])
        // Webhook → APNs is timed at a job's first request only: the retry's time is its backoff, and one job
        // retrying for an hour would raise the late-alerts alert on a quiet relay.
        #expect(h.metrics.exposition().contains("\nkumapush_webhook_to_apns_seconds_count 1\n"), "one observation for two requests")
    }

    @Test func expiredProviderTokenMakesOneNewTokenOnANewConnection() throws {
        let h = try DeliveryHarness(connections: 1)
        defer { h.stop() }
        let device = try h.device(1)
        try h.enqueue(device.id, ["first"])
        #expect(h.waitUntil { h.acceptedBodies(device.token) == ["first"] })
        // APNs now considers the current token stale; our clock has moved on by more than 20 minutes.
        h.simulator.faults.withLock { $0.expireTokensIssuedBefore = SystemClock().nowMillis() / 1000 + 30 }
        h.clock.advance(.seconds(20 * 60 + 1))
        try h.enqueue(device.id, ["second", "third"])
        #expect(h.waitUntil { h.acceptedBodies(device.token) == ["first", "second", "third"] })
        #expect(h.tokens.refreshes.load(ordering: .relaxed) == 2, "exactly one new token")
        #expect(h.simulator.answersByStatus[403] == 1)
    }

    /// Issue 12 item 5: Apple answers TooManyProviderTokenUpdates to renewals under 20 minutes, so a token ten
    /// minutes old is not renewed however often APNs calls it expired; past 20 minutes it is, once. Meanwhile a push
    /// refused twice is retried like one in an outage (a token that young is only "expired" to a host whose clock is
    /// off): it used to be resent with the same token on a new connection after every 403, a reconnect storm.
    @Test func aProviderTokenYoungerThanTwentyMinutesIsNotRenewed() throws {
        let claims = ClaimCounter()
        let h = try DeliveryHarness(connections: 1, engineStore: { ClaimCounting(inner: $0, counter: claims) })
        defer { h.stop() }
        let device = try h.device(1)
        _ = try h.tokens.token()
        h.simulator.faults.withLock { $0.expireTokensIssuedBefore = SystemClock().nowMillis() / 1000 + 30 }
        h.clock.advance(.seconds(10 * 60))
        try h.enqueue(device.id, ["waits for a token APNs takes"])
        // Counted against the engine's own work, not the clock: each time the store hands the job out (a retry or a
        // probe) it is sent, refused, sent once more on a new connection and refused again, then goes back to the
        // store: at most two refusals per claim. A resend per answer needs no claim, however fast the machine;
        // before, `refused < 50` in 2 s let that through on a machine 2.6 times slower.
        #expect(h.waitUntil { (h.simulator.answersByStatus[403] ?? 0) >= 6 }, "refused, and tried again")
        let refused = h.simulator.answersByStatus[403] ?? 0
        let claimed = claims.jobs.load(ordering: .relaxed)
        #expect(refused <= 2 * claimed, "retried with backoff, then only probes: not a resend per answer (\(refused) refusals, \(claimed) claims)")
        #expect(h.tokens.refreshes.load(ordering: .relaxed) == 1, "no renewal under 20 minutes")
        #expect(
            h.logLines.all.count { $0.contains("this host's clock is probably wrong (check NTP)") } == 1,
            "the runbook's line, once for the token however often APNs refuses it")
        h.clock.advance(.seconds(10 * 60 + 1))
        // Ten minutes late by our clock, so the body also says when the event happened.
        #expect(h.waitUntil { h.acceptedBodies(device.token).map { $0.hasPrefix("waits for a token APNs takes") } == [true] })
        #expect(h.tokens.refreshes.load(ordering: .relaxed) == 2)
    }

    /// A clock stepped back leaves the token "issued" in the future, which APNs refuses: it is made again, not
    /// kept until the clock catches up.
    @Test func aTokenIssuedInTheFutureIsMadeAgain() throws {
        let h = try DeliveryHarness()
        defer { h.stop() }
        let (_, generation) = try h.tokens.token()
        h.clock.advance(.seconds(-3600))
        #expect(try h.tokens.token().generation == generation + 1)
        h.clock.advance(.seconds(-60))
        #expect(h.tokens.expired(generation: generation + 1) == .renewed, "called expired, it is renewed at once")
    }

    /// APNs answers 503 for a while: attempts stop after the breaker opens (only probes go out), and once APNs
    /// is back the backlog goes out at once, in order.
    @Test func anOutageSpendsFewAttemptsAndTheBacklogFollowsRecoveryInOrder() throws {
        let h = try DeliveryHarness()
        defer { h.stop() }
        let devices = try (1...10).map { try h.device($0) }
        let until = SystemClock().nowMillis() + 2500
        h.simulator.faults.withLock { $0.unavailableUntil = until }
        for device in devices { try h.enqueue(device.id, (0..<10).map { "\($0)" }) }
        #expect(try h.waitUntil { try h.store.liveJobCount() == 0 })
        let failed = h.simulator.answersByStatus[503] ?? 0
        #expect(failed <= 25, "attempts during the outage stay bounded, not one per job per retry (\(failed))")
        for device in devices { #expect(h.acceptedBodies(device.token) == (0..<10).map { "\($0)" }) }
        // "Within seconds of recovery" is the deadline of the wait above; how fast is `make bench`'s outage figure.
    }

    /// SPEC §4: a push still unanswered when the grace ends is given back, after its connection is closed.
    @Test func shutdownReleasesLeasesOfPushesStillInFlight() throws {
        let h = try DeliveryHarness(connections: 1)
        let device = try h.device(1)
        h.simulator.faults.withLock { $0.silent = true }
        try h.enqueue(device.id, ["stuck"])
        #expect(h.waitUntil { (try? h.store.stats().jobsByState[.running]) == 1 })
        h.engine.shutdown(grace: .milliseconds(100))
        #expect(try h.store.stats().jobsByState[.available] == 1)
        // Its request was ended first, with its connection: another worker may now send the job, and the device's
        // next, without APNs still holding this one.
        #expect(h.pool.readyConnections == 0)
        h.pool.shutdown()
        h.simulator.stop()
    }
}

@Suite struct AlertStormTests {
    /// 60 down alerts for 60 monitors to one device at once: a handful of pushes that account for all 60 in order;
    /// a second device at the same time gets its alerts one by one.
    @Test func aStormBecomesAFewDigestsAndEveryAlertIsAccountedFor() throws {
        let h = try DeliveryHarness(deviceBurst: 10)
        defer { h.stop() }
        let stormy = try h.device(1)
        let calm = try h.device(2)
        let events = (0..<60).map { (index: Int) in
            AlertEvent(kind: .monitor, status: .down, monitorID: index, monitorName: "M\(index)", message: "down")
        }
        _ = try h.store.enqueue(
            events.map { NewJob(deviceID: stormy.id, publicID: UUID().uuidString.lowercased(), payload: $0.jobPayload) },
            now: h.clock.nowMillis(), ttl: .seconds(3600))
        try h.enqueue(calm.id, ["a", "b", "c"])
        #expect(h.waitUntil { (try? h.store.liveJobCount()) == 0 })
        let pushes = h.simulator.received.filter { $0.token == stormy.token && $0.status == 200 }
        #expect(pushes.count <= 15 && pushes.count >= 2)
        var listed: [String] = []
        for push in pushes {
            let alert = try #require((try JSONParser.parse(push.payload))["aps"]?["alert"])
            let title = try #require(alert["title"]?.stringValue)
            let body = try #require(alert["body"]?.stringValue)
            if title.contains(" monitors changed: ") {
                let names = body.components(separatedBy: " · ").map { String($0.dropLast(" is down".count)) }
                #expect(Int(title.split(separator: " ")[0]) == names.count)
                listed += names
            } else {
                listed.append(String(title.dropLast(" is down".count)))
            }
        }
        #expect(listed == (0..<60).map { "M\($0)" }, "all 60, in order")
        #expect(h.acceptedBodies(calm.token) == ["a", "b", "c"])
        #expect(h.metrics.value("kumapush_digests_total") >= 1)
    }

    /// Three alerts to a device over its burst, which wait behind a head accepted 50 minutes earlier: the digest
    /// carrying them asks APNs to keep it for an offline phone as long as the newest alert's JOB_TTL, not until the
    /// head's expiry ten minutes away.
    @Test func aDigestIsKeptForAnOfflinePhoneUntilItsNewestAlertExpires() throws {
        let h = try DeliveryHarness(deviceBurst: 1)
        defer { h.stop() }
        let device = try h.device(1)
        try h.enqueue(device.id, ["first"])
        #expect(h.waitUntil { (try? h.store.liveJobCount()) == 0 }, "the first push counts towards the burst")
        let fresh = h.clock.nowMillis()
        _ = try h.store.enqueue([Self.alert(device.id, "old")], now: fresh - 50 * 60_000, ttl: .seconds(3600))
        _ = try h.store.enqueue((1...2).map { Self.alert(device.id, "new \($0)") }, now: fresh, ttl: .seconds(3600))
        h.clock.advance(.seconds(6))  // past the digest window of the first push
        h.engine.wake()
        #expect(h.waitUntil { (try? h.store.liveJobCount()) == 0 })
        let digest = try #require(h.simulator.received.last { $0.token == device.token && $0.status == 200 })
        #expect(h.metrics.value("kumapush_digests_total") == 1)
        #expect(digest.headers["apns-expiration"] == String((fresh + 3_600_000) / 1000))
    }

    /// A digest whose head runs out of JOB_TTL while APNs does not answer: the head is dead-lettered as expired,
    /// and the fresh alerts merged into it stay queued and reach the phone afterwards (they were dead-lettered with it).
    @Test func alertsMergedIntoAHeadThatExpiredAreStillDelivered() throws {
        let h = try DeliveryHarness(requestTimeout: .milliseconds(1500), deviceBurst: 1)
        defer { h.stop() }
        let device = try h.device(1)
        try h.enqueue(device.id, ["first"])
        #expect(h.waitUntil { (try? h.store.liveJobCount()) == 0 }, "the first push counts towards the burst")
        h.simulator.faults.withLock { $0.silent = true }
        let now = h.clock.nowMillis()
        // Expires 10 s after the digest window of the first push ends (the clock is moved there below): sent as a
        // digest well within its time, which then runs out (the clock moved 15 s on) while its request waits for an
        // answer that never comes. The lease (the request's 1.5 s and 30 s more) still holds.
        _ = try h.store.enqueue([Self.alert(device.id, "old")], now: now + 16_000 - 3_600_000, ttl: .seconds(3600))
        _ = try h.store.enqueue((1...2).map { Self.alert(device.id, "New\($0)") }, now: now, ttl: .seconds(86_400))
        h.clock.advance(.seconds(6))
        h.engine.wake()
        #expect(h.waitUntil { h.metrics.value("kumapush_digests_total") == 1 }, "the head went out as a digest")
        #expect(h.metrics.value("kumapush_alerts_merged_total") == 3, "the head carried both fresh alerts")
        h.clock.advance(.seconds(15))
        #expect(h.waitUntil { (try? h.store.countDeadLetters(DeadLetterFilter())) == 1 }, "the head expired")
        h.simulator.faults.withLock { $0.silent = false }
        h.engine.wake()
        #expect(h.waitUntil { (try? h.store.liveJobCount()) == 0 })
        #expect(try h.store.countDeadLetters(DeadLetterFilter()) == 1, "only the head")
        let delivered = h.simulator.received.filter { $0.token == device.token && $0.status == 200 }.map {
            String(decoding: $0.payload, as: UTF8.self)
        }
        #expect(delivered.count == 2, "the first push, then the two fresh alerts")
        #expect(delivered.last?.contains("New1 is down") == true && delivered.last?.contains("New2 is down") == true, "\(delivered)")
    }

    /// A down alert of the monitor named `name`.
    static func alert(_ device: String, _ name: String) -> NewJob {
        let event = AlertEvent(kind: .monitor, status: .down, monitorID: name.hashValue, monitorName: name, message: "down")
        return NewJob(deviceID: device, publicID: UUID().uuidString.lowercased(), payload: event.jobPayload)
    }

    /// Issue 20: a device at DEVICE_QUEUE_MAX keeps acknowledging; the alerts folded into its waiting job reach the
    /// phone inside digests whose counts account for every alert, and storage never exceeds the cap.
    @Test func alertsFoldedPastTheDeviceCapAreAllAccountedForInTheDigests() throws {
        for burst in [10, nil] as [Int?] {
            let h = try DeliveryHarness(deviceBurst: burst)
            defer { h.stop() }
            let device = try h.device(1)
            h.simulator.faults.withLock { $0.unavailableUntil = Int64.max }  // hold everything until all 300 are in
            let events = (0..<300).map {
                AlertEvent(kind: .monitor, status: $0 % 4 == 0 ? .up : .down, monitorID: $0, monitorName: "M\($0)", message: "m")
            }
            var results: [EnqueueResult] = []
            for event in events {
                results += try h.store.enqueue(
                    [NewJob(deviceID: device.id, publicID: UUID().uuidString.lowercased(), payload: event.jobPayload)],
                    now: h.clock.nowMillis(), ttl: .seconds(3600), deviceCap: 50)
                #expect(try h.store.liveJobCount() <= 50)
            }
            #expect(results.filter { $0 == .merged }.count == 250)
            h.simulator.faults.withLock { $0.unavailableUntil = 0 }
            h.engine.wake()
            #expect(h.waitUntil { (try? h.store.liveJobCount()) == 0 }, "burst \(String(describing: burst))")
            let titles = h.simulator.received.filter { $0.token == device.token && $0.status == 200 }.compactMap { push in
                (try? JSONParser.parse(push.payload))?["aps"]?["alert"]?["title"]?.stringValue
            }
            let counted = titles.map { title -> Int in
                guard title.contains(" monitors changed: ") || title.contains(" alerts") else { return 1 }
                return Int(title.split(separator: " ")[0].replacingOccurrences(of: ",", with: "")) ?? 0
            }
            #expect(counted.reduce(0, +) == 300, "every alert accounted for: \(titles)")
            #expect(titles.count < 60, "a handful of pushes, not 300")
        }
    }
}
