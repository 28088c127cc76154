import Dispatch
import Foundation
import TestSupport
import Testing

@testable import HTTP2

extension HTTP2ConnectionTests {
    /// An APNs connection lives for weeks: a simulated day (86,400 one-second steps of the loop's clock: 86,400
    /// timeout sweeps, 1,440 idle PINGs answered by the server) leaves it holding at most one timer per slot, and
    /// it still delivers at the end. Before fixed slots, it held one more timer id every second.
    @Test func aDayOfTimersLeavesTheConnectionHoldingAFixedNumberOfTimers() throws {
        let server = try server { _, responder in responder.respond(status: 200) }
        defer { server.stop() }
        var configuration = HTTP2ClientConnection.Configuration(host: "127.0.0.1", port: server.port)
        configuration.requestTimeout = .seconds(4)  // a sweep every second
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
}
