import Foundation
import Synchronization

/// One persistent HTTP/2 connection over TLS to a server, on an event loop.
///
/// Requests may be sent from any thread; they are submitted while the server's SETTINGS_MAX_CONCURRENT_STREAMS
/// allows and wait in order otherwise. REFUSED_STREAM and streams above a GOAWAY's last stream id fail as
/// `.refused`, so the caller resends them elsewhere. Idle connections are PINGed; a request that gets no answer
/// within the request timeout is cancelled.
public final class HTTP2ClientConnection: Sendable {
    public typealias Completion = @Sendable (Result<HTTP2Response, HTTP2Failure>) -> Void

    public enum Event: Sendable, Equatable {
        /// TLS and HTTP/2 are up; requests flow.
        case ready
        /// The server changed how many streams it allows.
        case streamLimitChanged(Int)
        /// The server sent GOAWAY; no new requests go here. `reason` is its debug data (APNs sends JSON).
        case goingAway(reason: String)
        /// The connection is gone.
        case closed(reason: String)
    }

    public struct Configuration: Sendable {
        public var host: String
        public var port: UInt16
        /// `:authority`; defaults to host[:port].
        public var authority: String
        public var requestTimeout: Duration = .seconds(30)
        public var connectTimeout: Duration = .seconds(10)
        /// A PING is sent after this long without traffic; no PING ACK within `pingTimeout` closes the connection.
        public var idlePingInterval: Duration = .seconds(60)
        public var pingTimeout: Duration = .seconds(10)

        public init(host: String, port: UInt16) {
            self.host = host
            self.port = port
            authority = port == 443 ? host : "\(host):\(port)"
        }
    }

    /// A snapshot other threads can read (the pool's view of capacity).
    public struct Status: Sendable, Equatable {
        public var isReady = false
        public var isClosed = false
        public var isGoingAway = false
        public var streamLimit = 1
        /// Requests submitted or waiting on this connection.
        public var inFlight = 0
        public var freeStreams: Int { isReady && !isGoingAway && !isClosed ? max(0, streamLimit - inFlight) : 0 }
    }

    private let core: Mutex<ClientCore?>
    private let status = Mutex(Status())
    let loop: EventLoop
    let configuration: Configuration
    let tlsContext: TLSContext
    let onEvent: @Sendable (Event) -> Void

    public init(_ configuration: Configuration, tls: TLSContext, loop: EventLoop, onEvent: @escaping @Sendable (Event) -> Void) {
        self.configuration = configuration
        self.tlsContext = tls
        self.loop = loop
        self.onEvent = onEvent
        core = Mutex(nil)
    }

    /// Resolves and connects (the DNS lookup blocks the calling thread; call it off the event loop). Failures are
    /// reported as `.closed`.
    public func connect() {
        let fd: Int32
        let tls: TLSConnection
        do {
            fd = try Socket.startConnect(host: configuration.host, port: configuration.port)
            tls = try TLSConnection(clientOf: tlsContext, host: configuration.host)
        } catch {
            markClosed()
            onEvent(.closed(reason: "\(error)"))
            return
        }
        // TLSConnection is created here and from now on touched only on the loop.
        let box = UncheckedBox((fd, tls))
        loop.execute { [self] in
            let (fd, tls) = box.value
            let connection = ClientCore(owner: self, fd: fd, tls: tls)
            core.withLock { $0 = connection }
            connection.start()
        }
    }

    /// Sends `request`; `completion` runs once, on the event loop thread.
    public func send(_ request: HTTP2Request, completion: @escaping Completion) {
        status.withLock { $0.inFlight += 1 }
        loop.execute { [self] in
            guard let connection = core.withLock({ $0 }) else {
                finished(completion, .failure(.refused))
                return
            }
            connection.enqueue(request, completion: completion)
        }
    }

    /// Sends GOAWAY and closes once nothing is in flight (or at once with `immediately`).
    public func close(immediately: Bool = false) {
        loop.execute { [self] in
            guard let connection = core.withLock({ $0 }) else { return }
            connection.shutdown(immediately: immediately)
        }
    }

    public var currentStatus: Status { status.withLock { $0 } }

    // MARK: Called by the core on the loop

    func updateStatus(_ change: (inout Status) -> Void) { status.withLock { change(&$0) } }

    func finished(_ completion: Completion, _ result: Result<HTTP2Response, HTTP2Failure>) {
        status.withLock { $0.inFlight -= 1 }
        completion(result)
    }

    func markClosed() {
        status.withLock {
            $0.isClosed = true
            $0.isReady = false
        }
    }

    func released() { core.withLock { $0 = nil } }
}

/// Wraps a value that is handed from one thread to the event loop and then used only there.
struct UncheckedBox<Value>: @unchecked Sendable {
    // @unchecked Sendable: used only to move a freshly made, not yet shared value onto its event loop.
    let value: Value
    init(_ value: Value) { self.value = value }
}

/// The loop-confined state of a client connection.
final class ClientCore: HTTP2Transport, HTTP2SessionDelegate, @unchecked Sendable {
    // @unchecked Sendable: created on and confined to `owner.loop` (every method runs there); the Sendable
    // conformance exists only so the owner can keep it in a Mutex between loop tasks.

    struct Stream {
        var completion: HTTP2ClientConnection.Completion
        var status = 0
        var headers: [String: String] = [:]
        var body: [UInt8] = []
        /// When the request times out. Checked by one periodic sweep instead of a timer per stream: with a
        /// thousand streams in flight, per-stream timers cost more than the requests (seen in a profile).
        var deadline: ContinuousClock.Instant
    }

    /// Strong on purpose: a connection lives until it has closed, even if its owner dropped it; `released()`
    /// breaks the owner → core → owner cycle once the transport is closed.
    private let owner: HTTP2ClientConnection
    private var streams: [Int32: Stream] = [:]
    /// Requests waiting for a stream slot. They time out like streams do: a server that never grants a slot
    /// (a stream limit of 0, one stuck stream) must not hold a request forever.
    private var waiting: [Waiting] = []

    struct Waiting {
        let request: HTTP2Request
        let completion: HTTP2ClientConnection.Completion
        let deadline: ContinuousClock.Instant
    }
    private var ready = false
    private var goingAway = false
    private var closingWhenIdle = false
    private var lastActivity = ContinuousClock.now
    private var pingOutstanding = false
    private var timers: [Int] = []

    init(owner: HTTP2ClientConnection, fd: Int32, tls: TLSConnection) {
        self.owner = owner
        super.init(loop: owner.loop, fd: fd, tls: tls)
    }

    func start() {
        attach(connecting: true)
        scheduleTimeoutSweep()
        timers.append(loop.schedule(after: owner.configuration.connectTimeout) { [weak self] in
            guard let self, !self.ready else { return }
            self.fail("connect timed out after \(self.owner.configuration.connectTimeout)")
        })
    }

    override func handshakeCompleted() throws {
        guard tls.negotiatedProtocol == "h2" else { throw TLSError(message: "server did not agree to HTTP/2 (ALPN)") }
        session = try HTTP2Session(role: .client, delegate: self)
        ready = true
        owner.updateStatus {
            $0.isReady = true
            $0.streamLimit = session?.peerMaxConcurrentStreams ?? 1
        }
        owner.onEvent(.ready)
        schedulePing()
        submitWaiting()
    }

    func enqueue(_ request: HTTP2Request, completion: @escaping HTTP2ClientConnection.Completion) {
        guard !isClosed, !goingAway, !closingWhenIdle else {
            owner.finished(completion, .failure(.refused))
            return
        }
        waiting.append(Waiting(request: request, completion: completion, deadline: .now + owner.configuration.requestTimeout))
        if ready { submitWaiting() }
    }

    private func submitWaiting() {
        guard ready, let session, !goingAway else { return }
        var submitted = false
        while !waiting.isEmpty, streams.count < session.peerMaxConcurrentStreams {
            let next = waiting.removeFirst()
            let (request, completion) = (next.request, next.completion)
            var headers = [HTTP2Header(name: ":method", value: request.method),
                           HTTP2Header(name: ":scheme", value: "https"),
                           HTTP2Header(name: ":authority", value: owner.configuration.authority),
                           HTTP2Header(name: ":path", value: request.path, sensitive: true)]
            for (name, value) in request.headers {
                headers.append(HTTP2Header(name: name.lowercased(), value: value, sensitive: request.sensitiveHeaders.contains(name.lowercased())))
            }
            do {
                let id = try session.submitRequest(headers, body: request.body)
                streams[id] = Stream(completion: completion, deadline: .now + owner.configuration.requestTimeout)
                submitted = true
            } catch {
                owner.finished(completion, .failure(.refused))
            }
        }
        if submitted {
            lastActivity = .now
            flush()
        }
    }

    /// Every quarter of the request timeout (at most 1 s), fails the streams past their deadline.
    private func scheduleTimeoutSweep() {
        let interval = min(owner.configuration.requestTimeout / 4, .seconds(1))
        timers.append(loop.schedule(after: interval) { [weak self] in
            guard let self, !self.isClosed else { return }
            let now = ContinuousClock.now
            for (id, stream) in self.streams where stream.deadline <= now { self.timedOut(id) }
            self.timeOutWaiting(now: now)
            self.scheduleTimeoutSweep()
        })
    }

    private func timeOutWaiting(now: ContinuousClock.Instant) {
        guard waiting.contains(where: { $0.deadline <= now }) else { return }
        let expired = waiting.filter { $0.deadline <= now }
        waiting.removeAll { $0.deadline <= now }
        for entry in expired { owner.finished(entry.completion, .failure(.timedOut)) }
        closeIfDrained()
    }

    private func timedOut(_ id: Int32) {
        guard let stream = streams.removeValue(forKey: id) else { return }
        session?.resetStream(id, errorCode: HTTP2Session.cancel)
        flush()
        owner.finished(stream.completion, .failure(.timedOut))
        submitWaiting()
        closeIfDrained()
    }

    // MARK: HTTP2SessionDelegate

    func streamOpened(_ stream: Int32) {}

    func headerReceived(_ stream: Int32, name: String, value: String) {
        if name == ":status" {
            streams[stream]?.status = Int(value) ?? 0
        } else {
            streams[stream]?.headers[name] = value
        }
    }

    func dataReceived(_ stream: Int32, _ bytes: UnsafeRawBufferPointer) -> Bool {
        guard streams[stream] != nil else { return true }
        // APNs error bodies are tiny; a server streaming megabytes at us is broken or hostile.
        guard streams[stream]!.body.count + bytes.count <= 1 << 20 else { return false }
        streams[stream]!.body.append(contentsOf: bytes)
        return true
    }

    func streamEnded(_ stream: Int32) {
        lastActivity = .now
        guard let finished = streams.removeValue(forKey: stream) else { return }
        owner.finished(finished.completion, .success(HTTP2Response(status: finished.status, headers: finished.headers, body: finished.body)))
        submitWaiting()
        closeIfDrained()
    }

    func streamClosed(_ stream: Int32, errorCode: UInt32) {
        guard let closed = streams.removeValue(forKey: stream) else { return }
        let failure: HTTP2Failure = errorCode == HTTP2Session.refusedStream ? .refused : .reset(errorCode)
        owner.finished(closed.completion, .failure(failure))
        submitWaiting()
        closeIfDrained()
    }

    func goAwayReceived(lastStreamID: Int32, errorCode: UInt32, debugData: [UInt8]) {
        goingAway = true
        owner.updateStatus { $0.isGoingAway = true }
        owner.onEvent(.goingAway(reason: String(decoding: debugData, as: UTF8.self)))
        // Streams the server will never process: resend elsewhere.
        for id in streams.keys.filter({ $0 > lastStreamID }) {
            if let stream = streams.removeValue(forKey: id) {
                owner.finished(stream.completion, .failure(.refused))
            }
        }
        let pending = waiting
        waiting.removeAll()
        for entry in pending { owner.finished(entry.completion, .failure(.refused)) }
        closeIfDrained()
    }

    func settingsReceived() {
        let limit = session?.peerMaxConcurrentStreams ?? 1
        owner.updateStatus { $0.streamLimit = limit }
        owner.onEvent(.streamLimitChanged(limit))
        submitWaiting()
    }

    func pingAcknowledged() {
        pingOutstanding = false
        lastActivity = .now
    }

    // MARK: Keep-alive and closing

    private func schedulePing() {
        let interval = owner.configuration.idlePingInterval
        timers.append(loop.schedule(after: interval) { [weak self] in
            guard let self, !self.isClosed else { return }
            if self.pingOutstanding {
                return self.fail("no PING acknowledgement within \(self.owner.configuration.pingTimeout)")
            }
            if ContinuousClock.now - self.lastActivity >= interval {
                self.pingOutstanding = true
                self.session?.submitPing()
                self.flush()
                self.timers.append(self.loop.schedule(after: self.owner.configuration.pingTimeout) { [weak self] in
                    guard let self, self.pingOutstanding, !self.isClosed else { return }
                    self.fail("no PING acknowledgement within \(self.owner.configuration.pingTimeout)")
                })
            }
            self.schedulePing()
        })
    }

    func shutdown(immediately: Bool) {
        closingWhenIdle = true
        owner.updateStatus { $0.isGoingAway = true }
        let pending = waiting
        waiting.removeAll()
        for entry in pending { owner.finished(entry.completion, .failure(.refused)) }
        if immediately || streams.isEmpty {
            session?.submitGoAway()
            closeGracefully(reason: "closed by client")
        }
    }

    private func closeIfDrained() {
        guard (goingAway || closingWhenIdle), streams.isEmpty, waiting.isEmpty, !isClosed else { return }
        if closingWhenIdle { session?.submitGoAway() }
        closeGracefully(reason: goingAway ? "server sent GOAWAY" : "closed by client")
    }

    override func transportClosed(reason: String) {
        for timer in timers { loop.cancelTimer(timer) }
        timers.removeAll()
        // Say why first, so whoever wakes up on a failed request can already see the reason.
        owner.markClosed()
        owner.onEvent(.closed(reason: reason))
        let inFlight = streams
        streams.removeAll()
        for (_, stream) in inFlight {
            owner.finished(stream.completion, .failure(.connectionLost(reason)))
        }
        let pending = waiting
        waiting.removeAll()
        for entry in pending { owner.finished(entry.completion, .failure(.refused)) }
        // Drop the owner's reference after this call returns; `self` stays alive until then.
        loop.execute { [owner] in owner.released() }
    }
}
