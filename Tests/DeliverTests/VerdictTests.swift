import Common
import Deliver
import Queue
import Testing

/// The verdict table, row by row (SPEC §4; reference/apns.md §1.4).
@Suite struct VerdictTests {
    static let rows: [(Int, String, Verdict)] = [
        (200, "", .delivered),
        (410, "Unregistered", .removeDevice(reason: "Unregistered")),
        (410, "ExpiredToken", .removeDevice(reason: "ExpiredToken")),
        (410, "", .removeDevice(reason: "Unregistered")),
        (400, "BadDeviceToken", .deadLetter(reason: "BadDeviceToken")),
        (400, "DeviceTokenNotForTopic", .deadLetter(reason: "DeviceTokenNotForTopic")),
        (400, "BadCollapseId", .deadLetter(reason: "BadCollapseId")),
        (400, "BadExpirationDate", .deadLetter(reason: "BadExpirationDate")),
        (400, "BadMessageId", .deadLetter(reason: "BadMessageId")),
        (400, "BadPriority", .deadLetter(reason: "BadPriority")),
        (400, "DuplicateHeaders", .deadLetter(reason: "DuplicateHeaders")),
        (400, "InvalidPushType", .deadLetter(reason: "InvalidPushType")),
        (400, "MissingDeviceToken", .deadLetter(reason: "MissingDeviceToken")),
        (400, "PayloadEmpty", .deadLetter(reason: "PayloadEmpty")),
        (413, "PayloadTooLarge", .deadLetter(reason: "PayloadTooLarge")),
        (404, "BadPath", .deadLetter(reason: "BadPath")),
        (405, "MethodNotAllowed", .deadLetter(reason: "MethodNotAllowed")),
        (400, "IdleTimeout", .resend),
        (400, "BadTopic", .pause(reason: "BadTopic")),
        (400, "TopicDisallowed", .pause(reason: "TopicDisallowed")),
        (400, "MissingTopic", .pause(reason: "MissingTopic")),
        (403, "ExpiredProviderToken", .refreshProviderToken),
        (403, "InvalidProviderToken", .pause(reason: "InvalidProviderToken")),
        (403, "MissingProviderToken", .pause(reason: "MissingProviderToken")),
        (403, "BadCertificate", .pause(reason: "BadCertificate")),
        (403, "BadCertificateEnvironment", .pause(reason: "BadCertificateEnvironment")),
        (403, "Forbidden", .pause(reason: "Forbidden")),
        (403, "UnrelatedKeyIdInToken", .pause(reason: "UnrelatedKeyIdInToken")),
        (403, "BadEnvironmentKeyInToken", .pause(reason: "BadEnvironmentKeyInToken")),
        (429, "TooManyRequests", .retry(reason: "TooManyRequests", outage: false)),
        (429, "TooManyProviderTokenUpdates", .retry(reason: "TooManyProviderTokenUpdates", outage: true)),
        (500, "InternalServerError", .retry(reason: "InternalServerError", outage: true)),
        (503, "ServiceUnavailable", .retry(reason: "ServiceUnavailable", outage: true)),
        (503, "Shutdown", .retry(reason: "Shutdown", outage: true)),
        (502, "", .retry(reason: "HTTP 502", outage: true)),
        (400, "SomethingNew", .deadLetter(reason: "SomethingNew"))
    ]

    @Test(arguments: rows.indices)
    func eachStatusAndReasonHasItsVerdict(row: Int) {
        let (status, reason, verdict) = Self.rows[row]
        #expect(Verdict.forResponse(status: status, reason: reason) == verdict, "\(status) \(reason)")
    }

    @Test func badDeviceTokenNeverRemovesTheDevice() {
        for reason in ["BadDeviceToken", "DeviceTokenNotForTopic"] {
            if case .removeDevice = Verdict.forResponse(status: 400, reason: reason) { Issue.record("\(reason) must keep the device") }
        }
    }

    @Test func reasonsAreReadFromAPNsErrorBodiesAndSanitised() {
        #expect(Verdict.reason(fromBody: Array("{\"reason\":\"Unregistered\",\"timestamp\":1700000000000}".utf8)) == "Unregistered")
        #expect(Verdict.reason(fromBody: []) == "")
        #expect(Verdict.reason(fromBody: Array("not json".utf8)) == "")
        #expect(Verdict.reason(fromBody: Array("{\"reason\":\"Bad\\nToken <script>\"}".utf8)) == "BadTokenscript")
    }
}

@Suite struct BackoffTests {
    @Test func ceilingsDoubleFromTheBaseUpToTheCap() {
        let backoff = Backoff(base: .seconds(1), cap: .seconds(300))
        #expect(
            [1, 2, 3, 5, 8, 9, 30, 10_000].map { backoff.ceilingMillis(afterAttempt: $0) }
                == [1000, 2000, 4000, 16_000, 128_000, 256_000, 300_000, 300_000])
    }

    @Test func fullJitterSpansZeroToTheCeiling() {
        let backoff = Backoff(base: .seconds(1), cap: .seconds(300))
        #expect(backoff.delayMillis(afterAttempt: 3, random: 0) == 0)
        #expect(backoff.delayMillis(afterAttempt: 3, random: 1) == 4000)
        #expect(backoff.delayMillis(afterAttempt: 3, random: 0.5) == 2000)
        let draws = (0..<1000).map { _ in backoff.delayMillis(afterAttempt: 4) }
        #expect(draws.allSatisfy { (0...8000).contains($0) })
        #expect(Set(draws).count > 100, "jitter spreads retries")
    }
}

@Suite struct OutageBreakerTests {
    let outage = Verdict.retry(reason: "ServiceUnavailable", outage: true)

    /// Opened by four 503s in a window of ten; from job 100 on the probes are jobs 100, 101, ….
    func openBreaker() -> OutageBreaker {
        var breaker = OutageBreaker(
            windowSize: 10, minimumSamples: 4, threshold: 0.75,
            probeBackoff: Backoff(base: .seconds(1), cap: .seconds(30)), probeTimeout: .seconds(35))
        for job in 1...3 { _ = breaker.record(outage, jobID: Int64(job), now: 0) }
        #expect(breaker.record(outage, jobID: 4, now: 0) == .opened)
        return breaker
    }

    @Test func mostlyFailingAnswersOpenItAndOnlyProbesGoOutUntilOneSucceeds() {
        var breaker = openBreaker()
        #expect(breaker.allowance(now: 999) == .nothing)
        #expect(breaker.allowance(now: 1000) == .probe)
        breaker.probeSent(jobID: 100, now: 1000)
        #expect(breaker.allowance(now: 5000) == .nothing, "one probe at a time")
        #expect(breaker.record(outage, jobID: 100, now: 5000) == .none)
        #expect(breaker.allowance(now: 5000) == .nothing, "the next probe waits longer")
        let next = breaker.nextProbeAt!
        #expect(next > 5000)
        #expect(breaker.allowance(now: next) == .probe)
        breaker.probeSent(jobID: 101, now: next)
        #expect(breaker.record(.delivered, jobID: 101, now: next) == .recovered)
        #expect(breaker.allowance(now: next) == .normal)
    }

    @Test func aFailedStragglerIsNotTheProbeButASuccessfulOneShowsAPNsIsBack() {
        var breaker = openBreaker()
        breaker.probeSent(jobID: 100, now: 1000)
        #expect(breaker.record(outage, jobID: 7, now: 1100) == .none, "a request sent before the outage opened")
        #expect(breaker.probe?.jobID == 100, "still waiting for the probe")
        #expect(
            breaker.record(.deadLetter(reason: "BadDeviceToken"), jobID: 8, now: 1200) == .recovered,
            "any answer that is not an outage means APNs is up")
        #expect(breaker.probe == nil && breaker.isClosed)
    }

    /// The wedge of issue 19: the probe's job expired (or was postponed, could not be built, lost its device) and
    /// never reached APNs. The breaker must not wait for its answer.
    @Test func aProbeThatEndsWithoutAnAnswerLetsTheNextJobProbe() {
        var breaker = openBreaker()
        breaker.probeSent(jobID: 100, now: 1000)
        #expect(breaker.allowance(now: 2000) == .nothing)
        breaker.probeEnded(jobID: 99)
        #expect(breaker.allowance(now: 2000) == .nothing, "another job's fate says nothing about the probe")
        breaker.probeEnded(jobID: 100)
        #expect(breaker.allowance(now: 2000) == .probe)
        #expect(breaker.state != .closed, "a job's fate never closes the breaker either")
    }

    @Test func aProbeWithNoWordForTheProbeTimeoutIsTakenAsLost() {
        var breaker = openBreaker()
        breaker.probeSent(jobID: 100, now: 1000)
        #expect(breaker.allowance(now: 35_999) == .nothing)
        #expect(breaker.nextProbeAt == 36_000, "the engine wakes when the probe counts as lost")
        #expect(breaker.allowance(now: 36_000) == .probe)
    }

    /// A probe is a request like any other: it may wait for APNs as long as `APNS_REQUEST_TIMEOUT` allows, so it
    /// counts as lost only a little after that, however the timeout is set.
    @Test(arguments: [Duration.seconds(1), .seconds(30), .seconds(90)])
    func theProbeTimeoutFollowsTheRequestTimeout(requestTimeout: Duration) throws {
        var settings = Settings()
        settings.apnsRequestTimeout = requestTimeout
        settings.leaseTimeout = requestTimeout + .seconds(60)
        let configuration = DeliveryEngine.Configuration(settings: settings, worker: "w")
        #expect(configuration.probeTimeout == requestTimeout + .seconds(5))
        #expect(configuration.leaseNeededToSend == requestTimeout + .seconds(1))
    }

    @Test func resendsKeepTheProbeOutstanding() {
        var breaker = openBreaker()
        breaker.probeSent(jobID: 100, now: 1000)
        #expect(breaker.record(.resend, jobID: 100, now: 1100) == .none)
        #expect(breaker.record(.refreshProviderToken, jobID: 100, now: 1200) == .none)
        #expect(breaker.probe?.jobID == 100)
        #expect(breaker.allowance(now: 1300) == .nothing)
    }

    @Test func permanentRejectionsProveAPNsIsUp() {
        var breaker = OutageBreaker(windowSize: 10, minimumSamples: 4, threshold: 0.75)
        for job in 0..<20 { #expect(breaker.record(.deadLetter(reason: "BadDeviceToken"), jobID: Int64(job), now: 0) == .none) }
        for job in 0..<2 { _ = breaker.record(.retry(reason: "x", outage: true), jobID: Int64(job), now: 0) }
        #expect(breaker.state == .closed)
        #expect(breaker.record(.retry(reason: "TooManyRequests", outage: false), jobID: 1, now: 0) == .none)
        #expect(breaker.state == .closed)
    }

    @Test func aConfigurationFaultPausesAndProbesRarely() {
        var breaker = OutageBreaker(pauseProbeInterval: .seconds(60))
        #expect(breaker.record(.pause(reason: "InvalidProviderToken"), jobID: 1, now: 0) == .paused(reason: "InvalidProviderToken"))
        #expect(breaker.isPaused)
        #expect(breaker.allowance(now: 59_999) == .nothing)
        #expect(breaker.allowance(now: 60_000) == .probe)
        breaker.probeSent(jobID: 2, now: 60_000)
        #expect(breaker.record(.pause(reason: "InvalidProviderToken"), jobID: 2, now: 60_000) == .none)
        #expect(breaker.allowance(now: 60_001) == .nothing, "still paused: the next probe a minute later")
        #expect(breaker.allowance(now: 120_000) == .probe)
        breaker.probeSent(jobID: 3, now: 120_000)
        #expect(breaker.record(.delivered, jobID: 3, now: 120_000) == .recovered)
    }

    /// A pause's probe that meets an outage answer (APNs down too) must not let the next probe out at once: probes
    /// went back to back, each spending a job's attempt, for as long as APNs answered 503.
    @Test func aPausedProbeThatMeetsAnOutageWaitsItsIntervalAgain() {
        var breaker = OutageBreaker(pauseProbeInterval: .seconds(60))
        _ = breaker.record(.pause(reason: "InvalidProviderToken"), jobID: 1, now: 0)
        breaker.probeSent(jobID: 2, now: 60_000)
        #expect(breaker.record(.retry(reason: "ServiceUnavailable", outage: true), jobID: 2, now: 60_500) == .none)
        #expect(breaker.isPaused)
        #expect(breaker.allowance(now: 60_501) == .nothing)
        #expect(breaker.allowance(now: 120_500) == .probe)
    }

    @Test func allConnectionsDownOpensIt() {
        var breaker = OutageBreaker()
        #expect(breaker.connectionsDown(now: 0) == .opened)
        #expect(breaker.connectionsDown(now: 0) == .none)
    }

    @Test func resetForgetsEverything() {
        var breaker = openBreaker()
        breaker.probeSent(jobID: 100, now: 1000)
        breaker.reset()
        #expect(breaker.isClosed && breaker.probe == nil && breaker.allowance(now: 1001) == .normal)
    }
}
