import Dispatch
import Foundation
import Ingest
import TestSupport
import Testing

/// Which connections the server takes.
@Suite struct ConnectionAdmissionTests {
    /// At the connection limit new connections wait in the kernel's backlog and are served once a slot frees,
    /// instead of being accepted only to be closed (a closed connection is an alert Uptime Kuma never resends).
    /// libmicrohttpd stops watching its listening socket at the limit; this pins that behaviour.
    @Test func pastTheConnectionLimitAConnectionWaitsAndIsServed() throws {
        var configuration = HTTPServer.Configuration(host: "127.0.0.1", port: 0)
        configuration.threads = 2
        configuration.connectionLimit = 2
        let server = try HTTPServer(configuration) { _, responder in responder.respond(.json(200, "{}")) }
        let held = [try HeldSocket.connect(port: server.port), try HeldSocket.connect(port: server.port)]
        var released = false
        defer { if !released { held.forEach { _ = close($0) } } }
        let deadline = ContinuousClock.now + .seconds(10)
        while server.openConnections < 2 && ContinuousClock.now < deadline { Thread.sleep(forTimeInterval: 0.005) }
        #expect(server.openConnections == 2)

        let waiting = try HeldSocket.connect(port: server.port)  // completes in the backlog
        defer { close(waiting) }
        try HeldSocket.write("GET /x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", to: waiting)
        #expect(HeldSocket.readable(waiting, within: .milliseconds(300)) == false, "neither answered nor closed while full")
        held.forEach { _ = close($0) }
        released = true
        let answer = try HeldSocket.readAll(waiting, timeout: .seconds(10))
        #expect(answer.hasPrefix("HTTP/1.1 200"))
    }

    /// A server handed `listening` as systemd hands the units' socket, two threads, at most two connections,
    /// answering every request 200.
    private static func socketActivatedServer(_ listening: Int32, connectionsPerClient: Int? = nil) throws -> HTTPServer {
        var configuration = HTTPServer.Configuration(host: "127.0.0.1", port: 0)
        configuration.threads = 2
        configuration.connectionLimit = 2
        configuration.connectionsPerClient = connectionsPerClient
        configuration.listeningSocket = listening
        return try HTTPServer(configuration) { _, responder in responder.respond(.json(200, "{}")) }
    }

    /// The same under socket activation, where the relay accepts and hands each connection to libmicrohttpd: a burst
    /// past the limit must wait in the backlog too. Accepting the whole burst let libmicrohttpd close what was over
    /// its limit, unanswered: with systemd's socket units, every webhook of a burst past HTTP_MAX_CONNECTIONS lost.
    @Test func underSocketActivationABurstPastTheLimitWaitsAndIsServed() throws {
        let listening = try HeldSocket.listen()
        defer { close(listening.fd) }
        let server = try Self.socketActivatedServer(listening.fd)
        defer { server.stop() }
        // All connected (in the backlog) and their requests written before the relay accepts any of them.
        let burst = try (0..<12).map { _ in try HeldSocket.connect(port: listening.port) }
        defer { burst.forEach { _ = close($0) } }
        for fd in burst { try HeldSocket.write("GET /x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", to: fd) }
        for (index, fd) in burst.enumerated() {
            let answer = try HeldSocket.readAll(fd, timeout: .seconds(10))
            #expect(answer.hasPrefix("HTTP/1.1 200"), "connection \(index) of the burst: \(answer.isEmpty ? "closed unanswered" : answer)")
        }
    }

    /// Connections libmicrohttpd refuses when handed over (a client at its per-client cap) are not counted as on
    /// their way: counted, each refusal would take a slot for good, and after enough of them the acceptor would
    /// stop accepting with nobody connected.
    @Test func underSocketActivationRefusedConnectionsTakeNoSlot() throws {
        let listening = try HeldSocket.listen()
        defer { close(listening.fd) }
        let server = try Self.socketActivatedServer(listening.fd, connectionsPerClient: 1)
        defer { server.stop() }
        let held = try HeldSocket.connect(port: listening.port)
        try HeldSocket.write("GET /x HTTP/1.1\r\nHost: t\r\n\r\n", to: held)
        #expect(HeldSocket.readable(held, within: .seconds(10)), "the first connection is served and kept open")
        for attempt in 0..<4 {
            let refused = try HeldSocket.connect(port: listening.port)
            defer { close(refused) }
            // Closed at the cap (end of file), not left waiting in the backlog as it would be with its slot taken.
            var byte: UInt8 = 0
            #expect(HeldSocket.readable(refused, within: .seconds(10)) && read(refused, &byte, 1) == 0, "refusal \(attempt)")
        }
        close(held)
        // Until the server has seen that close, the same client is still at its cap.
        let deadline = ContinuousClock.now + .seconds(10)
        while server.openConnections > 0 && ContinuousClock.now < deadline { Thread.sleep(forTimeInterval: 0.005) }
        let next = try HeldSocket.connect(port: listening.port)
        defer { close(next) }
        try HeldSocket.write("GET /x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", to: next)
        #expect(try HeldSocket.readAll(next, timeout: .seconds(10)).hasPrefix("HTTP/1.1 200"))
    }
}

/// Plain blocking sockets a test holds open.
private enum HeldSocket {
    struct Failure: Error {}

    static func connect(port: UInt16) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Failure() }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            close(fd)
            throw Failure()
        }
        return fd
    }

    /// A listening socket on 127.0.0.1 and a free port, as systemd would hand one over.
    static func listen() throws -> (fd: Int32, port: UInt16) {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Failure() }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard bound, Glibc.listen(fd, 64) == 0 else {
            close(fd)
            throw Failure()
        }
        return (fd, UInt16(bigEndian: address.sin_port))
    }

    static func write(_ text: String, to fd: Int32) throws {
        let bytes = Array(text.utf8)
        guard bytes.withUnsafeBytes({ send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }) == bytes.count else { throw Failure() }
    }

    static func readable(_ fd: Int32, within time: Duration) -> Bool {
        var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        return poll(&descriptor, 1, Int32(time.components.seconds * 1000 + time.components.attoseconds / 1_000_000_000_000_000)) > 0
    }

    /// Reads until the server closes the connection.
    static func readAll(_ fd: Int32, timeout: Duration) throws -> String {
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            guard readable(fd, within: .milliseconds(100)) else { continue }
            let count = read(fd, &buffer, buffer.count)
            if count <= 0 { break }
            received += buffer[..<count]
        }
        return String(decoding: received, as: UTF8.self)
    }
}
