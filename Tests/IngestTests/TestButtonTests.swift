import Common
import Foundation
import Queue
import TestSupport
import Testing

@testable import Ingest

/// SPEC §2.2's 502 rows: a Test button never says "sent" for a push that cannot arrive.
@Suite struct TestButtonTests {
    /// A deliverer (in any process) paused by a configuration fault: the Test request is answered at once with
    /// the reason, not after TEST_WAIT with a 202 that reads as "Sent Successfully" in Uptime Kuma.
    @Test func aConfigurationFaultAnswersAWaitingTestAtOnceWithTheReason() throws {
        let h = try IngestHarness(["TEST_WAIT": "60s"])
        let (id, _) = try h.register()
        try h.store.recordPause(worker: "deliver-1", reason: "BadTopic", now: SystemClock().nowMillis())
        let response = try h.webhook(id, Fixtures.text("d-test-button.json"))
        #expect(response.status == 502)
        #expect(response.json?["error"] as? String == "relay cannot deliver: BadTopic (configuration)")
    }

    /// A pause recorded by a process that died long ago says nothing about delivery now.
    @Test func aStalePauseRecordIsIgnored() throws {
        let h = try IngestHarness(["TEST_WAIT": "100ms"])
        let (id, _) = try h.register()
        try h.store.recordPause(worker: "deliver-1", reason: "BadTopic", now: SystemClock().nowMillis() - 120_000)
        #expect(try h.webhook(id, Fixtures.text("d-test-button.json")).status == 202)
    }

    @Test func aPauseClearedByRecoveryNoLongerAnswers502() throws {
        let h = try IngestHarness(["TEST_WAIT": "100ms"])
        let (id, _) = try h.register()
        try h.store.recordPause(worker: "deliver-1", reason: "InvalidProviderToken", now: SystemClock().nowMillis())
        try h.store.recordPause(worker: "deliver-1", reason: nil, now: SystemClock().nowMillis())
        #expect(try h.webhook(id, Fixtures.text("d-test-button.json")).status == 202)
    }

    /// The relay itself gave up on the push (it expired before it could be sent): "not delivered", not
    /// "apns rejected", since APNs never saw it.
    @Test func aPushTheRelayGaveUpOnIsReportedAsNotDelivered() throws {
        let response = try testButtonAnswer(whenTheDelivererFinishesWith: .abandon(reason: "Expired"))
        #expect(response.status == 502)
        #expect(response.json?["error"] as? String == "not delivered: Expired")
    }

    /// APNs refused the push: Uptime Kuma shows the failure with APNs' reason, never "sent".
    @Test func aPushAPNsRejectedIsReported502WithItsReason() throws {
        let response = try testButtonAnswer(whenTheDelivererFinishesWith: .deadLetter(reason: "BadDeviceToken"))
        #expect(response.status == 502)
        #expect(response.json?["error"] as? String == "apns rejected: BadDeviceToken")
    }

    /// Posts a Test-button webhook, plays the deliverer (claims the job, finishes it with `kind`) and returns the
    /// answer the waiting request got.
    private func testButtonAnswer(whenTheDelivererFinishesWith kind: JobOutcome.Kind) throws -> RawHTTPClient.Response {
        let h = try IngestHarness(["TEST_WAIT": "20s"])
        let (id, _) = try h.register()
        let answer = ResponseBox()
        let port = h.service.port
        let body = Fixtures.bytes("d-test-button.json")
        let thread = Thread {
            answer.set(try? RawHTTPClient(port: port).send("POST", "/wh/\(id)", headers: [("Content-Type", "application/json")], body: body))
        }
        thread.start()
        let deadline = ContinuousClock.now + .seconds(10)
        var job: ClaimedJob?
        while job == nil && ContinuousClock.now < deadline {
            job = try h.store.claim(worker: "w", limit: 1, now: SystemClock().nowMillis(), lease: .seconds(60)).first
            if job == nil { Thread.sleep(forTimeInterval: 0.005) }
        }
        let claimed = try #require(job)
        #expect(claimed.reportsOutcome)
        _ = try h.store.finish(
            [JobOutcome(claimed, kind: kind)],
            worker: "w", now: SystemClock().nowMillis())
        return try #require(answer.wait(until: deadline))
    }
}

/// Hands a value from the thread that produced it to the test, which waits for it with a deadline.
class AnswerBox<Value>: @unchecked Sendable {
    // @unchecked Sendable: every access goes through `condition`.
    private let condition = NSCondition()
    private var value: Value?
    private var done = false

    func set(_ newValue: Value?) {
        condition.lock()
        value = newValue
        done = true
        condition.signal()
        condition.unlock()
    }

    func wait(until deadline: ContinuousClock.Instant) -> Value? {
        condition.lock()
        defer { condition.unlock() }
        while !done && ContinuousClock.now < deadline { _ = condition.wait(until: Date().addingTimeInterval(0.05)) }
        return value
    }
}

/// The answer a client got over HTTP.
typealias ResponseBox = AnswerBox<RawHTTPClient.Response>

/// Issue 13 item 5: waiting Test requests are answered from one poll, and at most `capacity` wait at once.
@Suite struct TestOutcomeWaiterTests {
    /// The answer a server-side responder was given.
    final class Recorder: AnswerBox<HTTPResponse>, HTTPResponder, @unchecked Sendable {
        func respond(_ response: HTTPResponse) { set(response) }
    }

    @Test func everyWaitingRequestGetsItsOwnOutcomeAndThoseOverCapacityAreNotHeld() throws {
        let directory = TemporaryDirectory()
        let store = try SQLiteStore(path: directory.path("relay.db"), now: SystemClock().nowMillis())
        // One device each: a device has at most one Test request waiting (SPEC §4).
        let devices = try ["ab", "cd", "ef"].map {
            try store.registerDevice(token: String(repeating: $0, count: 32), authTokenHash: "h", now: 0, newID: { try DeviceID.generate() })
                .device.id
        }
        let waiter = TestOutcomeWaiter(store: store, clock: SystemClock(), capacity: 2)
        let ids = ["a", "b", "c"].map { "00000000-0000-0000-0000-00000000000\($0)" }
        _ = try store.enqueue(
            zip(devices, ids).map { NewJob(deviceID: $0, publicID: $1, payload: AlertEvent.test("t").jobPayload, reportsOutcome: true) },
            now: SystemClock().nowMillis(), ttl: .seconds(60))
        let recorders = ids.map { _ in Recorder() }
        let deadline = ContinuousClock.now + .seconds(20)
        #expect(waiter.wait(for: ids[0], until: deadline, responder: recorders[0]))
        #expect(waiter.wait(for: ids[1], until: deadline, responder: recorders[1]))
        #expect(!waiter.wait(for: ids[2], until: deadline, responder: recorders[2]), "the third is over capacity")
        #expect(waiter.count == 2)

        // The deliverer finishes the two held jobs differently; each request gets its own answer.
        let claimed = try store.claim(worker: "w", limit: 10, now: SystemClock().nowMillis(), lease: .seconds(60))
        let first = try #require(claimed.first { $0.publicID == ids[0] })
        _ = try store.finish([JobOutcome(first, kind: .delivered)], worker: "w", now: SystemClock().nowMillis())
        let second = try #require(claimed.first { $0.publicID == ids[1] })
        _ = try store.finish(
            [JobOutcome(second, kind: .deadLetter(reason: "BadDeviceToken"))],
            worker: "w", now: SystemClock().nowMillis())
        #expect(recorders[0].wait(until: deadline)?.status == 200)
        let rejected = recorders[1].wait(until: deadline)
        #expect(rejected?.status == 502 && String(decoding: rejected?.body ?? [], as: UTF8.self).contains("apns rejected: BadDeviceToken"))
        #expect(waiter.count == 0)
    }
}
