import Dispatch
import Foundation
import Synchronization
import TestSupport
import Testing

@testable import HTTP2

extension HTTP2ConnectionTests {
    /// An APNs connection lives for weeks: a simulated day (86,400 one-second steps of the loop's clock, 1,440 idle
    /// PINGs answered by the server) leaves it holding at most one timer per slot, and
    /// it still delivers at the end. Before fixed slots, it held one more timer id every second.
    @Test func aDayOfTimersLeavesTheConnectionHoldingAFixedNumberOfTimers() throws {
        let server = try server { _, responder in responder.respond(status: 200) }
        defer { server.stop() }
        var configuration = HTTP2ClientConnection.Configuration(host: "127.0.0.1", port: server.port)
        configuration.requestTimeout = .seconds(4)
        configuration.idlePingInterval = .seconds(60)
        configuration.pingTimeout = .seconds(10)
        let events = EventLog()
        let connection = HTTP2ClientConnection(
            configuration, tls: try TLSContext.client(extraCAFile: TLSFixtures.caFile),
            loop: loop
        ) { events.append($0) }
        connection.connect()
        defer { connection.close(immediately: true) }
        #expect((try send(connection, HTTP2Request(path: "/first"))?.get())?.status == 200)

        var mostHeld = 0
        var mostOnLoop = 0
        var pingsAnswered = 0
        for _ in 0..<86_400 {
            var probe = connection.advanceClock(by: .seconds(1))
            if probe.pingOutstanding {
                // The PING went out over the real socket; its ACK takes real time. Wait for it without moving the
                // clock, so a slow machine cannot turn a simulated second into a missed PING deadline.
                let deadline = ContinuousClock.now + .seconds(10)
                while probe.pingOutstanding && ContinuousClock.now < deadline {
                    probe = connection.advanceClock(by: .zero)
                }
                try #require(!probe.pingOutstanding, "no PING ACK from the server")
                pingsAnswered += 1
            }
            mostHeld = max(mostHeld, probe.held)
            mostOnLoop = max(mostOnLoop, probe.onLoop)
        }
        #expect(mostHeld <= ClientCore.Timer.allCases.count)
        #expect(mostOnLoop <= ClientCore.Timer.allCases.count + 1)
        #expect(pingsAnswered >= 1_400)
        #expect(!events.all.contains { if case .closed = $0 { true } else { false } })
        #expect((try send(connection, HTTP2Request(path: "/after-a-day"))?.get())?.status == 200)
    }

    /// A deliverer keeps a push inside its job's lease by counting on the request being settled by its timeout
    /// after it was queued. So a request fails at its deadline (a periodic sweep let it run up to a period longer),
    /// and one that waited for a stream slot keeps the deadline it got when queued (it used to start its whole
    /// timeout again when it got the slot).
    @Test func requestsTimeOutAtTheDeadlineTheyGotWhenQueued() throws {
        let held = Mutex<HTTP2ServerResponder?>(nil)
        let seenByServer = Mutex<[String]>([])
        let server = try server(streams: 1) { request, responder in
            seenByServer.withLock { $0.append(request.path) }
            switch request.path {
            case "/ready": responder.respond(status: 200)
            case "/first": held.withLock { $0 = responder }
            default: break  // never answered
            }
        }
        defer { server.stop() }
        let connection = try client(server.port, timeout: .seconds(8))
        #expect((try send(connection, HTTP2Request(path: "/ready"))?.get())?.status == 200)
        let step = Mutex(0)
        let results = Mutex<[String: (step: Int, result: Result<HTTP2Response, HTTP2Failure>)]>([:])
        for path in ["/first", "/second", "/third"] {  // one stream allowed: the others wait for a slot
            connection.send(HTTP2Request(path: path)) { result in
                results.withLock { $0[path] = (step.withLock { $0 }, result) }
            }
        }
        // Steps of 100 ms of the loop's clock; real time only moves it further, so 80 steps reach the deadlines.
        for next in 1...200 where results.withLock({ $0.count }) < 3 {
            step.withLock { $0 = next }
            _ = connection.advanceClock(by: .milliseconds(100))
            guard next == 30 else { continue }
            // Halfway, the server answers the first: the second gets the slot with 5 s of its timeout left.
            let deadline = ContinuousClock.now + .seconds(10)
            while held.withLock({ $0 }) == nil && ContinuousClock.now < deadline { _ = connection.advanceClock(by: .zero) }
            held.withLock { $0 }?.respond(status: 200)
            while results.withLock({ $0["/first"] }) == nil && ContinuousClock.now < deadline { _ = connection.advanceClock(by: .zero) }
        }
        let seen = results.withLock { $0 }
        #expect((try? seen["/first"]?.result.get())?.status == 200)
        // The second's reset frees the slot while the third, queued with it, has under a tenth of its timeout left
        // (or is past it): it is failed, never sent — as refused, since it never reached the server
        // (`requestsThatNeverGetAStreamFailAsRefused`, `aRequestWithUnderATenthOfItsTimeoutLeftIsRefusedNotSent`).
        #expect(!seenByServer.withLock { $0 }.contains("/third"))
        #expect(seen["/second"]?.result == .failure(.timedOut))
        #expect(seen["/third"]?.result == .failure(.refused))
        for path in ["/second", "/third"] {
            // Not before its deadline either (the second got its slot at step 30); real time may move the clock a
            // little further than the steps, never by seconds.
            #expect((50...80).contains(seen[path]?.step ?? -1), "\(path) timed out at step \(seen[path]?.step ?? -1)")
        }
    }
}
