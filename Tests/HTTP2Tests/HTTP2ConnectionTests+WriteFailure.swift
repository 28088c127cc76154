import Dispatch
import Foundation
import Synchronization
import TestSupport
import Testing

@testable import HTTP2

extension HTTP2ConnectionTests {
    /// The server resets the connection (TCP RST) while the client is not looking; the client's next write fails
    /// mid-flush. The request fails as `connectionLost` with the write's error, the connection reports itself closed,
    /// and nothing reads or sends from inside nghttp2 on the way (the session would trap).
    @Test func aWriteFailureMidFlushFailsTheStreamAsLostWithTheWriteError() throws {
        let server = try server { _, responder in responder.respond(status: 200) }
        defer { server.stop() }
        let events = EventLog()
        let connection = try client(server.port, events: events)
        #expect((try send(connection, HTTP2Request(path: "/first"))?.get())?.status == 200)

        // Hold the client's loop in a timer, so that after it the loop runs its queued tasks — our request — before it
        // polls the socket again: it writes before it can see the reset.
        let holding = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        loop.execute { [loop] in
            loop.schedule(after: .zero) {
                holding.signal()
                release.wait()
            }
        }
        holding.wait()
        server.resetAllConnections()
        let deadline = ContinuousClock.now + .seconds(10)
        while server.connectionCount > 0 && ContinuousClock.now < deadline { Thread.sleep(forTimeInterval: 0.001) }
        try #require(server.connectionCount == 0, "the server did not reset its connection")

        let result = Mutex<Result<HTTP2Response, HTTP2Failure>?>(nil)
        let done = DispatchSemaphore(value: 0)
        connection.send(HTTP2Request(path: "/after-reset")) { outcome in
            result.withLock { $0 = outcome }
            done.signal()
        }
        release.signal()
        try #require(done.wait(timeout: .now() + 15) == .success)
        guard case .failure(.connectionLost(let reason)) = result.withLock({ $0 }) else {
            Issue.record("expected connectionLost, got \(String(describing: result.withLock { $0 }))")
            return
        }
        #expect(reason.hasPrefix("write: "), "the reason was \(reason)")
        #expect(events.all.contains(.closed(reason: reason)))
        #expect(connection.currentStatus.isClosed)
    }
}
