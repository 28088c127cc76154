import Common
import Deliver
import Foundation
import Queue
import Simulator
import TestSupport
import Testing

/// SPEC §4: sandbox and production tokens on one relay. The relay is configured for production; a second
/// simulator plays the sandbox, and each refuses the other's tokens as Apple does (BadDeviceToken).
@Suite struct EnvironmentTests {
    static let badToken = SimulatorFaults.Rejection(status: 400, reason: "BadDeviceToken")

    func requests(_ simulator: APNsSimulator?, _ token: String) -> Int { simulator?.received.filter { $0.token == token }.count ?? 0 }

    @Test func aSandboxTokenGetsItsAlertAndTheEnvironmentIsRemembered() throws {
        let h = try DeliveryHarness(withSandbox: true)
        defer { h.stop() }
        let testFlight = try h.device(1)
        h.simulator.faults.withLock { $0.byToken[testFlight.token] = Self.badToken }
        try h.enqueue(testFlight.id, ["first"])
        #expect(h.waitUntil { (h.sandbox?.received.filter { $0.token == testFlight.token && $0.status == 200 }.count ?? 0) == 1 })
        #expect(h.waitUntil { (try? h.store.liveJobCount()) == 0 })
        #expect(h.metrics.value("kumapush_apns_environment_switches_total", [("to", "sandbox")]) == 1)
        #expect(h.metrics.value("kumapush_apns_environment_learned_total", [("environment", "sandbox")]) == 1)
        try h.enqueue(testFlight.id, ["second", "third"])
        #expect(h.waitUntil { requests(h.sandbox, testFlight.token) == 3 })
        #expect(requests(h.simulator, testFlight.token) == 1, "after the first, straight to the sandbox")
        #expect(try h.store.countDeadLetters(DeadLetterFilter()) == 0)
        #expect(try h.store.device(id: testFlight.id)?.lastDeliveryError == "")
    }

    @Test func aTokenBothEnvironmentsRefuseIsDeadLetteredAndTheDeviceKept() throws {
        let h = try DeliveryHarness(withSandbox: true)
        defer { h.stop() }
        let broken = try h.device(2)
        h.simulator.faults.withLock { $0.byToken[broken.token] = Self.badToken }
        h.sandbox?.faults.withLock { $0.byToken[broken.token] = Self.badToken }
        try h.enqueue(broken.id, ["nowhere"])
        #expect(try h.waitUntil { try h.store.countDeadLetters(DeadLetterFilter(reason: "BadDeviceToken")) == 1 })
        #expect(requests(h.simulator, broken.token) == 1 && requests(h.sandbox, broken.token) == 1, "one resend, not a loop")
        #expect(try h.store.device(id: broken.id)?.lastDeliveryError == "BadDeviceToken")
    }

    /// The key works for production only, so the sandbox answers every push 403: a token production refuses is then
    /// refused by both. It was retried until JOB_TTL (two requests per attempt), a Test request answered "queued".
    @Test func aTokenTheOtherEnvironmentCannotTakeIsDeadLetteredAsBadDeviceToken() throws {
        let h = try DeliveryHarness(withSandbox: true)
        defer { h.stop() }
        let broken = try h.device(2)
        h.simulator.faults.withLock { $0.byToken[broken.token] = Self.badToken }
        h.sandbox?.faults.withLock { $0.byToken[broken.token] = .init(status: 403, reason: "BadEnvironmentKeyInToken") }
        try h.enqueue(broken.id, ["nowhere"])
        #expect(try h.waitUntil { try h.store.countDeadLetters(DeadLetterFilter(reason: "BadDeviceToken")) == 1 })
        #expect(requests(h.simulator, broken.token) == 1 && requests(h.sandbox, broken.token) == 1, "one resend, not a loop")
        #expect(try h.store.currentPause(since: 0) == nil, "the sandbox's fault does not pause production")
        let calm = try h.device(3)
        try h.enqueue(calm.id, ["still delivered"])
        #expect(h.waitUntil { h.acceptedBodies(calm.token) == ["still delivered"] })
    }

    @Test func productionTokensAndTopicMismatchesNeverTouchTheSandbox() throws {
        let h = try DeliveryHarness(withSandbox: true)
        defer { h.stop() }
        let appStore = try h.device(3)
        let wrongApp = try h.device(4)
        h.simulator.faults.withLock { $0.byToken[wrongApp.token] = .init(status: 400, reason: "DeviceTokenNotForTopic") }
        try h.enqueue(appStore.id, ["a", "b"])
        try h.enqueue(wrongApp.id, ["c"])
        #expect(try h.waitUntil { try h.store.liveJobCount() == 0 })
        #expect(h.acceptedBodies(appStore.token) == ["a", "b"])
        #expect(requests(h.sandbox, appStore.token) == 0 && requests(h.sandbox, wrongApp.token) == 0)
        #expect(h.other?.isOpen == false, "the sandbox connections were never opened")
    }

    /// A token registered again (a reinstall, a new build) may belong to the other environment now.
    @Test func aNewTokenForgetsTheRememberedEnvironment() throws {
        let h = try DeliveryHarness()
        defer { h.stop() }
        let device = try h.device(5)
        try h.store.setEnvironment(deviceID: device.id, token: device.token, environment: .sandbox)
        _ = try h.store.registerDevice(token: device.token, authTokenHash: "new", now: 0, newID: { "unused-id-0001" })
        let raw = try RawSQLite(path: h.directory.path("relay.db"))
        #expect(try raw.query("SELECT apns_environment IS NULL FROM devices WHERE id = '\(device.id)'") == [["1"]])
        try h.store.setEnvironment(deviceID: device.id, token: device.token, environment: .sandbox)
        _ = try h.store.updateDevice(id: device.id, token: String(repeating: "cd", count: 32), level: nil)
        #expect(try raw.query("SELECT apns_environment IS NULL FROM devices WHERE id = '\(device.id)'") == [["1"]])
    }

    /// The sandbox open and granting no stream, its SETTINGS already heard: a push sent before them would be refused
    /// and retried (an attempt spent), which is not what these tests are about.
    func grantingNoStream(_ h: DeliveryHarness) throws {
        h.sandbox?.setStreamLimit(0)
        let pool = try #require(h.other).pool()
        #expect(h.waitUntil { pool.readyConnections == 1 && pool.freeStreams == 0 }, "the sandbox's SETTINGS arrived")
    }

    /// Pushes to sandbox devices wait while the sandbox grants no stream (unreachable, or refusing streams), and must
    /// not take the configured environment's capacity: with more of them waiting than its free streams, its own
    /// devices were never claimed again. They go once the sandbox grants streams.
    @Test func pushesWaitingForTheOtherEnvironmentDoNotHoldUpTheConfiguredOne() throws {
        let h = try DeliveryHarness(streams: 4, connections: 1, withSandbox: true)
        defer { h.stop() }
        try grantingNoStream(h)
        let testFlight = try (10..<20).map { try h.device($0) }
        for device in testFlight {
            try h.store.setEnvironment(deviceID: device.id, token: device.token, environment: .sandbox)
            try h.enqueue(device.id, ["waits for the sandbox"])
        }
        #expect(h.waitUntil { h.engine.waitingForStreams >= 4 }, "more waiting than the production pool's 4 streams")
        let appStore = try h.device(1)
        try h.enqueue(appStore.id, ["served meanwhile"])
        #expect(h.waitUntil { h.acceptedBodies(appStore.token) == ["served meanwhile"] })
        h.sandbox?.setStreamLimit(100)
        #expect(h.waitUntil { testFlight.allSatisfy { requests(h.sandbox, $0.token) == 1 } })
        #expect(h.waitUntil { (try? h.store.liveJobCount()) == 0 })
    }

    /// SQLite gives a deleted newest job's id to the next job. A push waiting for the sandbox's streams whose
    /// device is deleted meanwhile, and another device's alert claimed and sent under the same id: when the sandbox
    /// grants streams, the old push must not go out in the new one's name — sent, its 200 was recorded for the new
    /// job's row (same id, worker and attempt), and the new push's own 503 was ignored: an alert lost.
    @Test func aWaitingPushWhoseDeviceWasDeletedDoesNotTakeOverItsReusedID() throws {
        let h = try DeliveryHarness(withSandbox: true)
        defer { h.stop() }
        try grantingNoStream(h)
        let (gone, kept) = (try h.device(40), try h.device(41))
        try h.store.setEnvironment(deviceID: gone.id, token: gone.token, environment: .sandbox)
        h.simulator.faults.withLock {
            $0.latencyMillis = 300
            $0.byToken[kept.token] = .init(status: 503, reason: "ServiceUnavailable")
        }
        try h.enqueue(gone.id, ["waits for the sandbox"])
        #expect(h.waitUntil { h.engine.waitingForStreams == 1 })
        let raw = try RawSQLite(path: h.directory.path("relay.db"))
        let reusedID = try raw.query("SELECT id FROM jobs")
        #expect(try h.store.deleteDevice(id: gone.id, now: h.clock.nowMillis()))
        try h.enqueue(kept.id, ["alert"])
        #expect(try raw.query("SELECT id FROM jobs") == reusedID, "the new job has the deleted one's id")
        #expect(try h.waitUntil { try raw.query("SELECT attempted_at IS NOT NULL FROM jobs") == [["1"]] }, "sent")
        h.sandbox?.setStreamLimit(100)
        #expect(h.waitUntil { h.simulator.received.contains { $0.token == kept.token && $0.status == 503 } })
        h.simulator.faults.withLock { $0.byToken[kept.token] = nil }
        #expect(h.waitUntil { h.acceptedBodies(kept.token) == ["alert"] }, "the refused alert is sent again, not taken as delivered")
        #expect(requests(h.sandbox, gone.token) == 0, "the deleted device's push was not sent")
    }

    /// A push that waits for a stream until its lease can no longer cover a request is given back and claimed again,
    /// not kept: kept, every new claim of the same job (after its lease ran out) queued one more copy.
    @Test func aPushWaitingPastItsLeaseIsGivenBackNotQueuedAgain() throws {
        let h = try DeliveryHarness(requestTimeout: .seconds(1), withSandbox: true, leaseBeyondRequest: .seconds(3))
        defer { h.stop() }
        try grantingNoStream(h)
        let device = try h.device(30)
        try h.store.setEnvironment(deviceID: device.id, token: device.token, environment: .sandbox)
        try h.enqueue(device.id, ["waits"])
        let raw = try RawSQLite(path: h.directory.path("relay.db"))
        func claimedAt() throws -> String { try raw.query("SELECT coalesce(attempted_at, 0) FROM jobs").first?.first ?? "gone" }
        var seen: Set<String> = []
        #expect(
            try h.waitUntil {
                seen.insert(try claimedAt())
                return seen.count >= 4
            }, "claimed, given back, claimed again")
        #expect(h.engine.waitingForStreams <= 1, "one job, at most one push waiting for it")
        #expect(try raw.query("SELECT attempt <= 1 FROM jobs") == [["1"]], "no attempt spent by giving it back")
        h.sandbox?.setStreamLimit(100)
        #expect(h.waitUntil { requests(h.sandbox, device.token) == 1 })
    }
}
