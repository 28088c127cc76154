internal import CLinux
import Foundation
import Synchronization

/// An HTTP/2 server over TLS on event loops: the engine of the APNs simulator and of the test servers.
/// It answers through a responder that can also misbehave on purpose (delay, reset, GOAWAY, drop, silence).
public final class HTTP2Server: Sendable {
    public struct Request: Sendable {
        public var method = ""
        public var path = ""
        public var authority = ""
        /// Lower-cased names; a repeated header keeps its last value, and `duplicateHeaders` names it.
        public var headers: [String: String] = [:]
        public var duplicateHeaders: [String] = []
        public var body: [UInt8] = []
    }

    public typealias Handler = @Sendable (Request, HTTP2ServerResponder) -> Void

    let tls: TLSContext
    let loops: [EventLoop]
    let handler: Handler
    private let listener: Int32
    public let port: UInt16
    private let connections = Mutex<[ObjectIdentifier: UncheckedBox<ServerCore>]>([:])
    private let nextLoop = Atomic<Int>(0)
    /// SETTINGS_MAX_CONCURRENT_STREAMS a connection is raised to (`setMaxConcurrentStreams`,
    /// `HTTP2ServerResponder.setConnectionStreamLimit`).
    let streamLimit: Atomic<UInt32>
    /// What a new connection announces first: `streamLimit` unless the server starts connections lower, as APNs
    /// starts a token-authenticated connection at one stream.
    private let initialStreamLimit: UInt32?

    public init(
        host: String, port: UInt16, tls: TLSContext, loops: [EventLoop], maxConcurrentStreams: UInt32 = 1000,
        initialMaxConcurrentStreams: UInt32? = nil, handler: @escaping Handler
    ) throws {
        precondition(!loops.isEmpty)
        self.tls = tls
        self.loops = loops
        self.handler = handler
        streamLimit = Atomic(maxConcurrentStreams)
        initialStreamLimit = initialMaxConcurrentStreams
        let (fd, bound) = try Socket.listen(host: host, port: port)
        listener = fd
        self.port = bound
        loops[0].execute { [self] in
            loops[0].register(listener, events: EPOLLIN.rawValue) { [weak self] _ in self?.acceptAll() }
        }
    }

    /// Stops accepting and closes every connection. Blocks until done.
    public func stop() {
        let done = DispatchSemaphore(value: 0)
        loops[0].execute { [self] in
            loops[0].unregister(listener)
            close(listener)
            done.signal()
        }
        done.wait()
        forEachConnection { $0.fail("server stopped") }
    }

    /// Open connections now.
    public var connectionCount: Int { connections.withLock { $0.count } }

    /// Announces a new SETTINGS_MAX_CONCURRENT_STREAMS to every connection (and to new ones).
    public func setMaxConcurrentStreams(_ limit: UInt32) {
        streamLimit.store(limit, ordering: .relaxed)
        forEachConnection { $0.advertise(limit) }
    }

    /// The limit a new connection starts at (never above the server's limit: one set to 0 grants nothing).
    var firstStreamLimit: UInt32 { min(initialStreamLimit ?? .max, streamLimit.load(ordering: .relaxed)) }

    /// Sends GOAWAY (with `debugData`, as APNs sends a JSON reason) on every connection, then closes them once
    /// their streams are answered.
    public func goAwayAll(debugData: String = "") {
        forEachConnection { $0.goAway(debugData: Array(debugData.utf8)) }
    }

    /// Drops every connection without a word, streams in flight included.
    public func dropAllConnections() {
        forEachConnection { $0.fail("dropped on purpose") }
    }

    /// Resets every connection (TCP RST, as a crashed server or a middlebox does): the client's next write fails.
    public func resetAllConnections() {
        forEachConnection { $0.abort("reset on purpose") }
    }

    private func forEachConnection(_ body: @escaping @Sendable (ServerCore) -> Void) {
        for box in connections.withLock({ Array($0.values) }) {
            let core = box.value
            core.loop.execute { body(core) }
        }
    }

    private func acceptAll() {
        while let fd = Socket.accept(listener) {
            let loop = loops[nextLoop.add(1, ordering: .relaxed).oldValue % loops.count]
            guard let tlsConnection = try? TLSConnection(serverOf: tls) else {
                close(fd)
                continue
            }
            let box = UncheckedBox((fd, tlsConnection))
            loop.execute { [self] in
                let core = ServerCore(server: self, loop: loop, fd: box.value.0, tls: box.value.1)
                connections.withLock { $0[ObjectIdentifier(core)] = UncheckedBox(core) }
                core.attach(connecting: false)
            }
        }
    }

    func removed(_ core: ServerCore) {
        _ = connections.withLock { $0.removeValue(forKey: ObjectIdentifier(core)) }
    }
}

/// Answers one request of an `HTTP2Server`, from any thread, once.
public struct HTTP2ServerResponder: Sendable {
    let core: UncheckedBox<WeakServerCore>
    let stream: Int32

    private func onLoop(_ body: @escaping @Sendable (ServerCore) -> Void) {
        guard let core = core.value.core else { return }
        core.loop.execute {
            guard let live = self.core.value.core else { return }
            body(live)
        }
    }

    public func respond(status: Int, headers: [(String, String)] = [], body: [UInt8] = []) {
        let stream = self.stream
        onLoop { $0.respond(stream, status: status, headers: headers, body: body) }
    }

    /// Answers after `delay` (simulated latency) without holding any thread.
    public func respond(after delay: Duration, status: Int, headers: [(String, String)] = [], body: [UInt8] = []) {
        let stream = self.stream
        onLoop { core in
            core.loop.schedule(after: delay) { [weak core] in core?.respond(stream, status: status, headers: headers, body: body) }
        }
    }

    /// RST_STREAM with `errorCode` (7 = REFUSED_STREAM).
    public func reset(errorCode: UInt32) {
        let stream = self.stream
        onLoop { core in
            core.session?.resetStream(stream, errorCode: errorCode)
            core.wantFlush()
            core.settle()
        }
    }

    /// GOAWAY on this request's connection. With `refusingThisStream`, its last stream id is below this stream,
    /// which the client must then resend elsewhere (as when a server restarts mid-batch).
    public func goAway(debugData: String = "", refusingThisStream: Bool = false) {
        let stream = self.stream
        onLoop { $0.goAway(debugData: Array(debugData.utf8), lastStreamID: refusingThisStream ? stream - 2 : nil) }
    }

    /// Announces a new SETTINGS_MAX_CONCURRENT_STREAMS on this request's connection only: one stream when
    /// `reduced`, else the server's limit. APNs drops a connection to one stream after it rejects a notification
    /// and raises it again after one it accepts (reference/apns.md §1.6).
    public func setConnectionStreamLimit(reduced: Bool) {
        onLoop { core in
            guard let full = core.server?.streamLimit.load(ordering: .relaxed) else { return }
            core.advertise(reduced ? min(1, full) : full)
        }
    }

    /// Drops this request's connection at once.
    public func dropConnection() {
        onLoop { $0.fail("dropped on purpose") }
    }
}

/// A weak reference read on the core's own loop (see `HTTP2ServerResponder`).
struct WeakServerCore {
    weak var core: ServerCore?
}

/// The loop-confined state of one server connection. Like the client, its nghttp2 callbacks only record; the
/// transport's `settle()` sends (see `HTTP2Transport`).
final class ServerCore: HTTP2Transport, HTTP2SessionDelegate, @unchecked Sendable {
    // @unchecked Sendable: confined to `loop` — every access from elsewhere goes through `loop.execute` — and
    // marked Sendable only so those closures may carry it there.
    private(set) weak var server: HTTP2Server?
    /// The SETTINGS_MAX_CONCURRENT_STREAMS this side last announced.
    private var advertisedLimit: UInt32 = 0
    private var requests: [Int32: HTTP2Server.Request] = [:]
    private var answered: Set<Int32> = []
    private var goingAway = false
    /// A GOAWAY asked before the session existed (its debug data), sent once it does.
    private var goAwayAtHandshake: [UInt8]?
    static let maxRequestBody = 64 * 1024

    init(server: HTTP2Server, loop: EventLoop, fd: Int32, tls: TLSConnection) {
        self.server = server
        super.init(loop: loop, fd: fd, tls: tls)
    }

    override func handshakeCompleted() throws {
        guard tls.negotiatedProtocol == "h2" else { throw TLSError(message: "client did not negotiate h2") }
        advertisedLimit = server?.firstStreamLimit ?? 100
        let session = try HTTP2Session(role: .server, delegate: self, maxConcurrentStreams: advertisedLimit)
        self.session = session
        if let debugData = goAwayAtHandshake {
            goAwayAtHandshake = nil
            session.submitGoAway(errorCode: 0, debugData: debugData, lastStreamID: nil)
        }
    }

    /// A loop task: announce `limit` streams, unless it is what this connection announced last.
    func advertise(_ limit: UInt32) {
        guard let session, limit != advertisedLimit else { return }
        advertisedLimit = limit
        session.submitSettings(maxConcurrentStreams: limit)
        wantFlush()
        settle()
    }

    override func transportClosed(reason: String) {
        requests.removeAll()
        // The server's table holds the last reference: drop it after this call returns, never during it.
        loop.execute { [self] in server?.removed(self) }
    }

    /// A loop task (or timer): answer `stream`.
    func respond(_ stream: Int32, status: Int, headers: [(String, String)], body: [UInt8]) {
        guard isOpen, answered.insert(stream).inserted else { return }
        var all = [HTTP2Header(name: ":status", value: String(status))]
        all += headers.map { HTTP2Header(name: $0.0.lowercased(), value: $0.1) }
        try? session?.submitResponse(stream, headers: all, body: body)
        wantFlush()
        settleAtEndOfTurn()
    }

    /// A loop task: GOAWAY now, close once the streams at or below its last stream id are answered. Asked while the
    /// TLS handshake is still under way, there is no HTTP/2 session to send it on: it is kept and sent right after
    /// the session's SETTINGS (`handshakeCompleted`). It was dropped, and the connection came up and stayed.
    func goAway(debugData: [UInt8], lastStreamID: Int32? = nil) {
        guard !isClosed, !goingAway else { return }
        goingAway = true
        guard isOpen, let session else {
            goAwayAtHandshake = debugData
            return
        }
        session.submitGoAway(errorCode: 0, debugData: debugData, lastStreamID: lastStreamID)
        if let lastStreamID { requests = requests.filter { $0.key <= lastStreamID } }
        wantFlush()
        settle()
    }

    override func runDeferredWork() {
        if goingAway && requests.isEmpty { closeGracefully(reason: "GOAWAY sent") }
    }

    // MARK: HTTP2SessionDelegate

    func streamOpened(_ stream: Int32) { requests[stream] = HTTP2Server.Request() }

    func headerReceived(_ stream: Int32, name nameBytes: UnsafeRawBufferPointer, value valueBytes: UnsafeRawBufferPointer) {
        guard requests[stream] != nil else { return }
        let name = String(decoding: nameBytes, as: UTF8.self)
        let value = String(decoding: valueBytes, as: UTF8.self)
        switch name {
        case ":method": requests[stream]!.method = value
        case ":path": requests[stream]!.path = value
        case ":authority": requests[stream]!.authority = value
        default:
            if requests[stream]!.headers[name] != nil { requests[stream]!.duplicateHeaders.append(name) }
            requests[stream]!.headers[name] = value
        }
    }

    func dataReceived(_ stream: Int32, _ bytes: UnsafeRawBufferPointer) -> Bool {
        guard requests[stream] != nil else { return true }
        guard requests[stream]!.body.count + bytes.count <= Self.maxRequestBody else { return false }
        requests[stream]!.body.append(contentsOf: bytes)
        return true
    }

    func streamEnded(_ stream: Int32) {
        guard let request = requests[stream] else { return }
        let responder = HTTP2ServerResponder(core: UncheckedBox(WeakServerCore(core: self)), stream: stream)
        server?.handler(request, responder)
    }

    func streamClosed(_ stream: Int32, errorCode: UInt32) {
        requests[stream] = nil
        answered.remove(stream)
    }

    func goAwayReceived(lastStreamID: Int32, errorCode: UInt32, debugData: [UInt8]) {}
    func settingsReceived() {}
    func pingAcknowledged() {}
}
