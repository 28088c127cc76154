import Foundation
import HTTP2
import Testing

@testable import Deliver

/// A busy delivery loop waits for half its pushes in flight to be answered before its next round (one transaction
/// for many answers), and wakes at the first answer otherwise (`DeliveryEngine.answersToGather`,
/// `DeliveryInbox.wait`).
@Suite struct GatheringAnswersTests {
    @Test func halfOfThePushesInFlightOnceThePipeIsAtLeastHalfFull() {
        #expect(DeliveryEngine.answersToGather(inFlight: 1000, concurrency: 1000, from: 128) == 500)
        #expect(DeliveryEngine.answersToGather(inFlight: 500, concurrency: 1000, from: 128) == 250)
        #expect(DeliveryEngine.answersToGather(inFlight: 499, concurrency: 1000, from: 128) == 1, "less than half full")
        #expect(DeliveryEngine.answersToGather(inFlight: 127, concurrency: 200, from: 128) == 1, "too few in flight")
        #expect(DeliveryEngine.answersToGather(inFlight: 128, concurrency: 200, from: 128) == 64)
        #expect(DeliveryEngine.answersToGather(inFlight: 4000, concurrency: 4000, from: 128) == 1000, "one claim's most")
        #expect(DeliveryEngine.answersToGather(inFlight: 0, concurrency: 0, from: 0) == 1)
    }

    /// Answers posted before the wait, fewer than it gathers, do not end it: it lasts until its deadline. (An answer
    /// posted while the loop was busy leaves a signal behind; a wait that took that signal for "enough" would return
    /// at once with one answer, and the loop would run a round per answer as before.)
    @Test func fewerAnswersThanGatheredWaitForTheDeadline() throws {
        let inbox = DeliveryInbox()
        _ = inbox.take()
        let connection = try Self.connection()
        for id in 1...2 { inbox.post(Self.answer(Int64(id), connection)) }

        let started = ContinuousClock.now
        inbox.wait(until: started + .milliseconds(50), answers: 3)
        #expect(ContinuousClock.now - started >= .milliseconds(50))
        #expect(inbox.take().answers.count == 2)
    }

    @Test func enoughAnswersEndTheWaitWhateverItsDeadline() throws {
        let inbox = DeliveryInbox()
        _ = inbox.take()
        let connection = try Self.connection()
        let poster = Thread { for id in 1...3 { inbox.post(Self.answer(Int64(id), connection)) } }
        poster.start()

        let started = ContinuousClock.now
        inbox.wait(until: started + .seconds(120), answers: 3)
        #expect(ContinuousClock.now - started < .seconds(120), "the third answer woke it")
        #expect(inbox.take().answers.count == 3)
    }

    /// New jobs (serve's ingest committing, PostgreSQL's NOTIFY) and the shutdown do not wait for a batch.
    @Test func aWakeUpOrTheStopEndsAGatheringWait() throws {
        for request in [DeliveryInbox.requestWake, DeliveryInbox.requestStop] {
            let inbox = DeliveryInbox()
            _ = inbox.take()
            let asker = Thread { request(inbox)() }
            asker.start()
            let started = ContinuousClock.now
            inbox.wait(until: started + .seconds(120), answers: 500)
            #expect(ContinuousClock.now - started < .seconds(120))
        }
    }

    /// Outside a gathering wait, the first answer wakes the loop, as before.
    @Test func oneAnswerEndsAnOrdinaryWait() throws {
        let inbox = DeliveryInbox()
        _ = inbox.take()
        let connection = try Self.connection()
        let poster = Thread { inbox.post(Self.answer(1, connection)) }
        poster.start()
        let started = ContinuousClock.now
        inbox.wait(until: started + .seconds(120))
        #expect(ContinuousClock.now - started < .seconds(120))
        #expect(inbox.take().answers.count == 1)
    }

    private static func connection() throws -> HTTP2ClientConnection {
        // Never connected: an answer names the connection it came on, and none is used here.
        HTTP2ClientConnection(
            .init(host: "127.0.0.1", port: 1), tls: try TLSContext.client(), loop: EventLoop(name: "test"), onEvent: { _ in })
    }

    private static func answer(_ id: Int64, _ connection: HTTP2ClientConnection) -> DeliveryEngine.Answer {
        DeliveryEngine.Answer(jobID: id, publicID: "job-\(id)", result: .failure(.refused), connection: connection)
    }
}
