import Common
import Deliver
import Foundation
import Queue
import Simulator
import Synchronization
import TestSupport
import Testing

/// SPEC §4 "Delivery never stalls": every breaker state has a way out, and a deliverer that sends nothing while
/// jobs are due resets itself and says so.
@Suite struct DeliveryLivenessTests {
    /// Issue 19's reproduction: an outage outlives JOB_TTL, so the probe's job expires instead of reaching APNs.
    /// Before the fix the breaker waited for that probe's answer forever and nothing was delivered again.
    @Test func anOutageLongerThanTheJobTTLDoesNotWedgeDelivery() throws {
        let h = try DeliveryHarness()
        defer { h.stop() }
        let devices = try (1...12).map { try h.device($0) }
        let recovery = SystemClock().nowMillis() + 4000
        h.simulator.faults.withLock { $0.unavailableUntil = recovery }
        for device in devices { try h.enqueue(device.id, ["\(device.token.suffix(2))-1", "\(device.token.suffix(2))-2"], ttl: .milliseconds(1500)) }
        #expect(h.waitUntil { (h.simulator.answersByStatus[503] ?? 0) >= 8 }, "enough 503s to open the breaker")
        #expect(try h.waitUntil { try h.store.countDeadLetters(DeadLetterFilter(reason: "Expired")) == 24 }, "every job outlived its TTL")
        #expect(h.waitUntil { SystemClock().nowMillis() > recovery })

        let fresh = try h.device(99)
        try h.enqueue(fresh.id, ["after"])
        #expect(h.waitUntil { h.acceptedBodies(fresh.token) == ["after"] }, "a new job is delivered after recovery")

        #expect(try h.store.replayDeadLetters(DeadLetterFilter(reason: "Expired"), limit: 100, now: h.clock.nowMillis(), ttl: .seconds(3600)) == 24)
        h.engine.wake()
        #expect(
            h.waitUntil { devices.allSatisfy { h.acceptedBodies($0.token) == ["\($0.token.suffix(2))-1", "\($0.token.suffix(2))-2"] } },
            "replayed jobs are delivered, in per-device order")
        #expect(h.metrics.value("kumapush_delivery_stalls_total") == 0, "the breaker found its way out without the stall detector")
    }

    /// A quiet relay whose few pushes are all backed off for a long time (`RETRY_MAX` reached over a long outage) must
    /// still notice APNs' recovery: the probe takes the soonest retry instead of waiting for one to fall due. Here
    /// every retry is drawn from up to an hour, so without that the pushes arrive within the wait below only when
    /// one of eight draws falls under ten seconds (about 2 %).
    @Test func aProbeDoesNotWaitForBackedOffRetries() throws {
        let h = try DeliveryHarness(retryBackoff: Backoff(base: .seconds(3600), cap: .seconds(3600)))
        defer { h.stop() }
        let devices = try (1...8).map { try h.device($0) }
        let recovery = SystemClock().nowMillis() + 1500
        h.simulator.faults.withLock { $0.unavailableUntil = recovery }
        for device in devices { try h.enqueue(device.id, ["down"], ttl: .seconds(86_400)) }
        #expect(h.waitUntil { (h.simulator.answersByStatus[503] ?? 0) >= 8 }, "every push failed once: the breaker opens")
        #expect(
            h.waitUntil(timeout: .seconds(10)) { devices.allSatisfy { h.acceptedBodies($0.token) == ["down"] } },
            "a probe found APNs back and the backlog went out")
        #expect(try h.store.stats().jobsByState[.retryable, default: 0] == 0)
    }

    /// A probe whose device is deleted while its push waits is settled like any other probe that ends unanswered.
    @Test func aProbeThatNeverReachesAPNsIsReplacedByTheNextJob() throws {
        let h = try DeliveryHarness()
        defer { h.stop() }
        let devices = try (1...4).map { try h.device($0) }
        let recovery = SystemClock().nowMillis() + 2500
        h.simulator.faults.withLock { $0.unavailableUntil = recovery }
        for device in devices { try h.enqueue(device.id, ["x1", "x2"], ttl: .milliseconds(800)) }
        #expect(try h.waitUntil { try h.store.countDeadLetters(DeadLetterFilter(reason: "Expired")) == 8 })
        for device in devices { _ = try h.store.deleteDevice(id: device.id, now: h.clock.nowMillis()) }
        #expect(h.waitUntil { SystemClock().nowMillis() > recovery })
        let fresh = try h.device(9)
        try h.enqueue(fresh.id, ["after"])
        #expect(h.waitUntil { h.acceptedBodies(fresh.token) == ["after"] })
    }

    /// A server that grants no stream at all: jobs are due, nothing can be sent and APNs never reports a failure. The detector must notice, count it, reset the
    /// breaker and connections, and report the deliverer unhealthy.
    @Test func aDelivererThatSendsNothingWhileJobsAreDueReportsAStall() throws {
        let h = try DeliveryHarness(streams: 0, connections: 1, requestTimeout: .seconds(120), stallTimeout: .seconds(1))
        defer { h.stop() }
        let first = try h.device(1)
        let second = try h.device(2)
        #expect(h.engine.isHealthy)
        #expect(h.waitUntil { h.pool.readyConnections == 1 && h.pool.freeStreams == 0 }, "the server's SETTINGS arrived")
        try h.enqueue(first.id, ["due, never sent"])
        try h.enqueue(second.id, ["due, never sent"])
        #expect(h.waitUntil { h.metrics.value("kumapush_delivery_stalls_total") >= 1 })
        #expect(!h.engine.isHealthy)
        #expect(h.simulator.received.isEmpty)
        #expect(h.logLines.text.contains("delivery stalled: jobs are due, APNs is not known to be failing"), "the runbook's line")
        // The reset fails whatever the recycled connection still held; that is not APNs answering, so the report
        // stands until it does: the server grants streams again, the pushes arrive, and the deliverer is healthy.
        h.simulator.setStreamLimit(100)
        #expect(h.waitUntil { h.acceptedBodies(first.token).count == 1 && h.acceptedBodies(second.token).count == 1 })
        #expect(h.waitUntil { h.engine.isHealthy })
        #expect(h.logLines.text.contains("delivery resumed after a stall"), "the runbook's line")
    }

    /// A request still open when its lease ends could reach APNs after another worker delivered the device's next
    /// job. With a lease that does not outlive a request by the second a loaded host may take to reset it (what the
    /// start-up check refuses), no push may be sent: each claim gives the job back unsent, its attempt not spent,
    /// and the next claim tries again.
    @Test(arguments: [Duration.zero, .milliseconds(900)])
    func aPushIsNotSentWhenItsLeaseCannotOutliveTheRequest(leaseBeyondRequest: Duration) throws {
        let h = try DeliveryHarness(leaseBeyondRequest: leaseBeyondRequest)
        defer { h.stop() }
        let device = try h.device(1)
        try h.enqueue(device.id, ["never sent"])
        let database = try RawSQLite(path: h.directory.path("relay.db"))
        func claimedAt() throws -> String { try database.query("SELECT coalesce(attempted_at, 0) FROM jobs").first?.first ?? "delivered" }
        #expect(try h.waitUntil { try claimedAt() != "0" }, "claimed once")
        let first = try claimedAt()
        #expect(try h.waitUntil { try claimedAt() != first }, "given back and claimed again")
        #expect(h.simulator.received.isEmpty)
        #expect(try database.query("SELECT max(attempt) <= 1 FROM jobs") == [["1"]], "no attempt spent by giving it back")
    }

    /// A stall whose jobs leave without a push (their devices deleted, their TTL past) ends with them: nothing due
    /// is nothing stalled, and `/health` must not stay 503 until some unrelated push goes out.
    @Test func aStallEndsWhenNothingIsDueAnyMore() throws {
        let h = try DeliveryHarness(streams: 0, connections: 1, requestTimeout: .seconds(120), stallTimeout: .seconds(1))
        defer { h.stop() }
        let device = try h.device(1)
        #expect(h.waitUntil { h.pool.readyConnections == 1 && h.pool.freeStreams == 0 }, "the server's SETTINGS arrived")
        try h.enqueue(device.id, ["due, never sent"])
        #expect(h.waitUntil { h.metrics.value("kumapush_delivery_stalls_total") >= 1 })
        #expect(!h.engine.isHealthy)
        #expect(try h.store.deleteDevice(id: device.id, now: h.clock.nowMillis()))
        #expect(h.waitUntil { h.engine.isHealthy })
        #expect(h.metrics.value("kumapush_delivery_stalls_total") == 1)
        #expect(h.metrics.value("relay_delivery_stalls_total") == 1, "SPEC §4's name counts the same")
    }
    /// Paused by a configuration fault, with nothing queued any more: the loop claimed on every turn (two empty
    /// write transactions every 25 ms, which on SQLite take the writer ingest commits with). A probe that found
    /// nothing now waits for a claim to be due: a new job, or the once-a-second claim.
    @Test func aProbeWithNothingQueuedDoesNotClaimOnEveryTurn() throws {
        let claims = ClaimCounter()
        let h = try DeliveryHarness(engineStore: { ClaimCounting(inner: $0, counter: claims) })
        defer { h.stop() }
        let device = try h.device(1)
        h.simulator.faults.withLock { $0.byToken[device.token] = .init(status: 403, reason: "InvalidProviderToken") }
        try h.enqueue(device.id, ["refused"])
        #expect(h.waitUntil { (try? h.store.currentPause(since: 0)) == "InvalidProviderToken" }, "paused")
        #expect(try h.store.deleteDevice(id: device.id, now: h.clock.nowMillis()), "nothing queued any more")
        h.clock.advance(.seconds(61))  // the pause's next probe is due
        h.engine.wake()
        let before = claims.count.load(ordering: .relaxed)
        let window = ContinuousClock.now
        #expect(h.waitUntil(timeout: .seconds(2)) { ContinuousClock.now - window >= .seconds(2) })
        let made = claims.count.load(ordering: .relaxed) - before
        #expect(made <= 8, "a claim a second or so, not one per turn (\(made) in 2 s)")

        let fresh = try h.device(2)
        try h.enqueue(fresh.id, ["probe"])
        #expect(h.waitUntil { h.acceptedBodies(fresh.token) == ["probe"] }, "a new job still probes at once")
    }
}

final class ClaimCounter: Sendable {
    let count = Atomic<Int>(0)
    /// Jobs the claims returned (an empty claim adds none).
    let jobs = Atomic<Int>(0)
    /// The digest's sealed backlog reads (`carryBacklog`: a write that locks the device), for `DigestLookTests`.
    let sealedReads = Atomic<Int>(0)
}

/// Counts the claims and the sealed backlog reads the engine makes (each is a write transaction).
/// @unchecked Sendable: as ForwardingStore; the one added property is a Sendable counter.
final class ClaimCounting: ForwardingStore, @unchecked Sendable {
    let counter: ClaimCounter
    init(inner: SQLiteStore, counter: ClaimCounter) {
        self.counter = counter
        super.init(inner: inner)
    }
    override func claim(worker: String, limit: Int, now: Int64, lease: Duration) throws(StoreError) -> [ClaimedJob] {
        counter.count.add(1, ordering: .relaxed)
        let claimed = try super.claim(worker: worker, limit: limit, now: now, lease: lease)
        counter.jobs.add(claimed.count, ordering: .relaxed)
        return claimed
    }
    override func carryBacklog(deviceID: String, limit: Int, minimum: Int, deviceCap: Int) throws(StoreError) -> [PendingJob] {
        counter.sealedReads.add(1, ordering: .relaxed)
        return try super.carryBacklog(deviceID: deviceID, limit: limit, minimum: minimum, deviceCap: deviceCap)
    }
}
