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
        /// When TLS and HTTP/2 came up; kept once closed (`isReady` is not), so a closed connection still tells
        /// whether it had been up.
        public var readyAt: ContinuousClock.Instant?
        public var isClosed = false
        public var isGoingAway = false
        public var streamLimit = 1
        /// Requests submitted or waiting on this connection.
        public var inFlight = 0
        public var freeStreams: Int { isReady && !isGoingAway && !isClosed ? max(0, streamLimit - inFlight) : 0 }
    }

    private let core: Mutex<ClientCore?>
    private let status = Mutex(Status())
    /// `close` was called: a connect not yet under way does not start (a pool recycling a connection whose connect
    /// still waited its turn would otherwise get it up later, untracked and never closed).
    private let closeRequested = Atomic<Bool>(false)
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
        guard !closeRequested.load(ordering: .relaxed) else { return closedBeforeConnecting() }
        let fd: Int32
        let tls: TLSConnection
        do {
            // TLS first: it holds no descriptor, so if it cannot be set up there is no socket to leak.
            tls = try TLSConnection(clientOf: tlsContext, host: configuration.host)
            fd = try Socket.startConnect(host: configuration.host, port: configuration.port)
        } catch {
            markClosed()
            onEvent(.closed(reason: "\(error)"))
            return
        }
        // TLSConnection is created here and from now on touched only on the loop.
        let box = UncheckedBox((fd, tls))
        loop.execute { [self] in
            let (fd, tls) = box.value
            // A `close` since the check above queued its task before this one, and found nothing to close.
            guard !closeRequested.load(ordering: .relaxed) else {
                _ = Glibc.close(fd)
                return closedBeforeConnecting()
            }
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

    /// Sends GOAWAY and closes once nothing is in flight; with `immediately`, at once, and with requests still open
    /// by aborting the TCP connection (they fail as `.connectionLost`).
    public func close(immediately: Bool = false) {
        closeRequested.store(true, ordering: .relaxed)
        loop.execute { [self] in
            guard let connection = core.withLock({ $0 }) else { return }
            connection.shutdown(immediately: immediately)
        }
    }

    public var currentStatus: Status { status.withLock { $0 } }

    /// What a test sees of the connection's timers after `advanceClock`.
    package struct TimerProbe: Sendable {
        /// Timers the connection holds.
        package var held: Int
        /// Timers pending on its whole event loop.
        package var onLoop: Int
        /// A PING was sent and its ACK has not come yet.
        package var pingOutstanding: Bool
    }

    /// Tests: moves the event loop's clock ahead by `duration` (see `EventLoop.advanceClock`), runs the timers that
    /// fell due, and reports what the connection holds afterwards. Blocks until done; not from the loop thread.
    package func advanceClock(by duration: Duration) -> TimerProbe {
        let probe = Mutex(TimerProbe(held: 0, onLoop: 0, pingOutstanding: false))
        let done = DispatchSemaphore(value: 0)
        loop.execute { [self] in
            loop.advanceClock(by: duration)
            let connection = core.withLock { $0 }
            probe.withLock {
                $0 = TimerProbe(
                    held: connection?.timersHeld ?? 0, onLoop: loop.pendingTimerCount,
                    pingOutstanding: connection?.pingOutstanding ?? false)
            }
            done.signal()
        }
        done.wait()
        return probe.withLock { $0 }
    }

    /// Tests: the stream id the next request takes (odd), to reach the end of a connection's ids. Blocks until done;
    /// not from the loop thread.
    package func setNextStreamID(_ id: Int32) {
        let done = DispatchSemaphore(value: 0)
        loop.execute { [self] in
            core.withLock { $0 }?.setNextStreamID(id)
            done.signal()
        }
        done.wait()
    }

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

    private func closedBeforeConnecting() {
        markClosed()
        onEvent(.closed(reason: "closed by client before connecting"))
    }
}

/// Wraps a value that is handed from one thread to the event loop and then used only there.
struct UncheckedBox<Value>: @unchecked Sendable {
    // @unchecked Sendable: used only to move a freshly made, not yet shared value onto its event loop.
    let value: Value
    init(_ value: Value) { self.value = value }
}

/// The loop-confined state of a client connection.
///
/// nghttp2 callbacks (`HTTP2SessionDelegate`) only settle streams and record what is wanted; submitting waiting
/// requests and closing once drained happen in `runDeferredWork()`, which the transport runs after the library
/// call returned (see `HTTP2Transport`).
final class ClientCore: HTTP2Transport, HTTP2SessionDelegate, @unchecked Sendable {
    // @unchecked Sendable: created on and confined to `owner.loop` (every method runs there); the Sendable
    // conformance exists only so the owner can keep it in a Mutex between loop tasks.

    struct Stream {
        var completion: HTTP2ClientConnection.Completion
        var status = 0
        var headers: [String: String] = [:]
        var body: [UInt8] = []
        /// When the request times out: set when it was queued, kept when it got its stream, so a request that
        /// waited for a slot is not given its whole timeout again.
        var deadline: ContinuousClock.Instant
    }

    struct Waiting {
        let request: HTTP2Request
        let completion: HTTP2ClientConnection.Completion
        let deadline: ContinuousClock.Instant
    }

    /// What the client side is doing, on top of the transport's `State`.
    enum Phase: Equatable {
        /// Connecting and handshaking; requests wait.
        case starting
        /// Requests flow, as many at once as the server allows.
        case ready
        /// No new requests; the connection closes once its streams are answered.
        case draining(DrainCause)
    }

    enum DrainCause: Equatable {
        /// The server sent GOAWAY.
        case serverGoAway
        /// Our owner asked to close (we send GOAWAY).
        case closeRequested
    }

    /// Strong on purpose: a connection lives until it has closed, even if its owner dropped it; `released()`
    /// breaks the owner → core → owner cycle once the transport is closed.
    private let owner: HTTP2ClientConnection
    private var phase = Phase.starting
    private var streams: [Int32: Stream] = [:]
    /// Requests waiting for a stream slot. They time out like streams do: a server that never grants a slot
    /// (a stream limit of 0, one stuck stream) must not hold a request forever.
    private var waiting: [Waiting] = []
    private var lastActivity: ContinuousClock.Instant

    /// The connection's timers, one slot each; a PING is outstanding exactly while `.pingDeadline` is set.
    enum Timer: CaseIterable {
        case connect, deadline, ping, pingDeadline
    }
    private let timers: TimerSlots<Timer>

    init(owner: HTTP2ClientConnection, fd: Int32, tls: TLSConnection) {
        self.owner = owner
        timers = TimerSlots(loop: owner.loop)
        lastActivity = owner.loop.now
        super.init(loop: owner.loop, fd: fd, tls: tls)
    }

    func start() {
        attach(connecting: true)
        timers.set(.connect, after: owner.configuration.connectTimeout) { [weak self] in
            guard let self, self.phase == .starting, !self.isClosed else { return }
            self.fail("connect timed out after \(self.owner.configuration.connectTimeout)")
        }
    }

    /// Timers this connection holds now (tests: bounded by `Timer.allCases.count`, however long it lives).
    var timersHeld: Int { timers.count }
    var pingOutstanding: Bool { timers.isSet(.pingDeadline) }

    override func handshakeCompleted() throws {
        guard tls.negotiatedProtocol == "h2" else { throw TLSError(message: "server did not agree to HTTP/2 (ALPN)") }
        session = try HTTP2Session(role: .client, delegate: self)
        if phase == .starting { phase = .ready }
        owner.updateStatus {
            $0.isReady = true
            $0.readyAt = .now
            $0.streamLimit = session?.peerMaxConcurrentStreams ?? 1
        }
        timers.cancel(.connect)
        owner.onEvent(.ready)
        schedulePing()
    }

    /// A loop task: queue `request` and settle.
    func enqueue(_ request: HTTP2Request, completion: @escaping HTTP2ClientConnection.Completion) {
        guard acceptsRequests else {
            owner.finished(completion, .failure(.refused))
            return
        }
        waiting.append(Waiting(request: request, completion: completion, deadline: loop.now + owner.configuration.requestTimeout))
        // Every deadline already held is earlier than this one: a set timer stays right.
        if !timers.isSet(.deadline) { armDeadlineTimer() }
        settleAtEndOfTurn()
    }

    private var acceptsRequests: Bool {
        switch state {
        case .connecting, .handshaking, .open: if case .draining = phase { return false } else { return true }
        case .closing, .draining, .lingering, .closed: return false
        }
    }

    override func runDeferredWork() {
        if submitWaiting() == .streamIDsUsedUp { retire(reason: "stream ids used up") }
        closeIfDrained()
    }

    private enum SubmitResult { case done, streamIDsUsedUp }

    private func submitWaiting() -> SubmitResult {
        guard phase == .ready, !waiting.isEmpty, let session else { return .done }
        // Taken from the front in one go at the end: removing the first of hundreds waiting, one at a time, moved
        // all the others each time.
        var submitted = 0
        defer { waiting.removeFirst(submitted) }
        let now = loop.now
        while submitted < waiting.count, streams.count < session.peerMaxConcurrentStreams {
            let next = waiting[submitted]
            submitted += 1
            let (request, completion, deadline) = (next.request, next.completion, next.deadline)
            // Past its deadline (it waited for a stream, or the loop ran late): it never goes, and fails as refused —
            // never sent, so nothing about the server's health (`timeOutWaiting`).
            guard deadline > now else {
                owner.finished(completion, .failure(.refused))
                continue
            }
            var headers = [
                HTTP2Header(name: ":method", value: request.method),
                HTTP2Header(name: ":scheme", value: "https"),
                HTTP2Header(name: ":authority", value: owner.configuration.authority),
                HTTP2Header(name: ":path", value: request.path, sensitive: true)
            ]
            headers.reserveCapacity(headers.count + request.headers.count)
            for (name, value) in request.headers {
                let name = Self.lowercased(name)
                headers.append(HTTP2Header(name: name, value: value, sensitive: request.sensitiveHeaders.contains(name)))
            }
            do {
                let id = try session.submitRequest(headers, body: request.body)
                streams[id] = Stream(completion: completion, deadline: deadline)
                lastActivity = now
                wantFlush()
            } catch {
                owner.finished(completion, .failure(.refused))
                if let failure = error as? HTTP2Session.Failure, failure.streamIDsUsedUp { return .streamIDsUsedUp }
            }
        }
        return .done
    }

    func setNextStreamID(_ id: Int32) { session?.setNextStreamID(id) }

    /// This connection can send no more (its stream ids are used up): the waiting requests are refused (resent on
    /// another connection), those open finish here, and the owner is told to replace it, as after a GOAWAY.
    private func retire(reason: String) {
        phase = .draining(.closeRequested)
        owner.updateStatus { $0.isGoingAway = true }
        owner.onEvent(.goingAway(reason: reason))
        refuseWaiting()
    }

    /// HTTP/2 header names are lower case; callers mostly write them so already, and then keep their string.
    private static func lowercased(_ name: String) -> String {
        name.utf8.contains(where: { (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains($0) }) ? name.lowercased() : name
    }

    private func closeIfDrained() {
        guard case .draining(let cause) = phase, streams.isEmpty, waiting.isEmpty, isOpen else { return }
        if cause == .closeRequested { session?.submitGoAway() }
        closeGracefully(reason: cause == .serverGoAway ? "server sent GOAWAY" : "closed by client")
    }

    /// Fails the requests whose deadline passed, then waits for the next deadline. One timer for the earliest,
    /// not one per stream: with a thousand streams in flight, per-stream timers cost more than the requests (seen in
    /// a profile). Not a periodic sweep either: that let a request outlive its timeout by the sweep's period, and a
    /// deliverer counts on a request being settled by its timeout to keep it inside the job's lease.
    private func armDeadlineTimer() {
        // Deadlines follow the order requests were queued, and every stream was queued before every waiting
        // request: the earliest is among the streams, or else the first waiting.
        guard let earliest = streams.values.lazy.map(\.deadline).min() ?? waiting.first?.deadline else {
            timers.cancel(.deadline)
            return
        }
        timers.set(.deadline, after: max(.zero, earliest - loop.now)) { [weak self] in
            guard let self, !self.isClosed else { return }
            let now = self.loop.now
            var expired: [HTTP2ClientConnection.Completion] = []
            for (id, stream) in self.streams where stream.deadline <= now {
                self.streams[id] = nil
                self.session?.resetStream(id, errorCode: HTTP2Session.cancel)
                expired.append(stream.completion)
            }
            // The resets are written before the caller hears of the timeouts: it may send the job again at once.
            self.wantFlush()
            self.settle()
            for completion in expired { self.owner.finished(completion, .failure(.timedOut)) }
            self.timeOutWaiting(now: now)
            self.armDeadlineTimer()
        }
    }

    /// Requests whose deadline passed while they waited for a stream (the server's limit fell, or it answers slowly)
    /// fail as refused: they were never sent, so they are resent and say nothing of an outage, where a timeout
    /// would spend the push's attempt and count towards the outage breaker.
    private func timeOutWaiting(now: ContinuousClock.Instant) {
        guard waiting.contains(where: { $0.deadline <= now }) else { return }
        let expired = waiting.filter { $0.deadline <= now }
        waiting.removeAll { $0.deadline <= now }
        for entry in expired { owner.finished(entry.completion, .failure(.refused)) }
    }

    // MARK: HTTP2SessionDelegate (called from inside nghttp2: settle streams and record, never send)

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
        lastActivity = loop.now
        guard let finished = streams.removeValue(forKey: stream) else { return }
        owner.finished(finished.completion, .success(HTTP2Response(status: finished.status, headers: finished.headers, body: finished.body)))
    }

    func streamClosed(_ stream: Int32, errorCode: UInt32) {
        guard let closed = streams.removeValue(forKey: stream) else { return }
        let failure: HTTP2Failure = errorCode == HTTP2Session.refusedStream ? .refused : .reset(errorCode)
        owner.finished(closed.completion, .failure(failure))
    }

    func goAwayReceived(lastStreamID: Int32, errorCode: UInt32, debugData: [UInt8]) {
        if phase != .draining(.closeRequested) { phase = .draining(.serverGoAway) }
        owner.updateStatus { $0.isGoingAway = true }
        owner.onEvent(.goingAway(reason: String(decoding: debugData, as: UTF8.self)))
        // Streams the server will never process: resend elsewhere.
        for id in streams.keys.filter({ $0 > lastStreamID }) {
            if let stream = streams.removeValue(forKey: id) {
                owner.finished(stream.completion, .failure(.refused))
            }
        }
        refuseWaiting()
    }

    func settingsReceived() {
        let limit = session?.peerMaxConcurrentStreams ?? 1
        owner.updateStatus { $0.streamLimit = limit }
        owner.onEvent(.streamLimitChanged(limit))
    }

    func pingAcknowledged() {
        timers.cancel(.pingDeadline)
        lastActivity = loop.now
    }

    // MARK: Keep-alive and closing

    private func schedulePing() {
        let interval = owner.configuration.idlePingInterval
        timers.set(.ping, after: interval) { [weak self] in
            guard let self, !self.isClosed else { return }
            if !self.timers.isSet(.pingDeadline), self.loop.now - self.lastActivity >= interval {
                self.session?.submitPing()
                self.wantFlush()
                let timeout = self.owner.configuration.pingTimeout
                self.timers.set(.pingDeadline, after: timeout) { [weak self] in
                    self?.fail("no PING acknowledgement within \(timeout)")
                }
            }
            self.schedulePing()
            self.settle()
        }
    }

    /// A loop task: no new requests; GOAWAY and close once nothing is in flight (or at once with `immediately`).
    func shutdown(immediately: Bool) {
        phase = .draining(.closeRequested)
        owner.updateStatus { $0.isGoingAway = true }
        refuseWaiting()
        if !isOpen {
            // Nothing was sent yet, or the transport is closing anyway — but with `immediately` not lingering: the
            // owner may stop this loop right after this task, and a linger timer it never runs would keep the socket,
            // session and loop allocated.
            if immediately { fail("closed by client") } else { closeGracefully(reason: "closed by client") }
        } else if immediately, !streams.isEmpty {
            // Requests still open when the owner wants them gone (a deliverer giving their jobs back at shutdown):
            // abort, so the server stops reading this connection now instead of answering them later, after
            // another worker may have sent the same jobs again.
            abort("closed by client with requests open")
            return
        } else if immediately {
            // GOAWAY and close_notify go out now, as far as the socket takes them at once (best effort: nothing is in
            // flight), and the socket closes with them instead of lingering for the peer's: the owner may stop this
            // loop right after this task (a pool shutting down), and a lingering connection's timer would never run
            // — its socket, session and loop never freed.
            session?.submitGoAway()
            closeGracefully(reason: "closed by client")
            settle()
            fail("closed by client")
            return
        }
        // Otherwise `closeIfDrained` closes once the streams in flight are answered.
        settle()
    }

    private func refuseWaiting() {
        let pending = waiting
        waiting.removeAll()
        for entry in pending { owner.finished(entry.completion, .failure(.refused)) }
    }

    override func transportClosed(reason: String) {
        timers.cancelAll()
        // Say why first, so whoever wakes up on a failed request can already see the reason.
        owner.markClosed()
        owner.onEvent(.closed(reason: reason))
        let inFlight = streams
        streams.removeAll()
        for (_, stream) in inFlight {
            owner.finished(stream.completion, .failure(.connectionLost(reason)))
        }
        refuseWaiting()
        // Drop the owner's reference after this call returns; `self` stays alive until then.
        loop.execute { [owner] in owner.released() }
    }
}
