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
        /// False: responses carry their status and body only, and the response headers are never turned into
        /// Strings and a dictionary (two Strings and a dictionary entry per header, on every request). The deliverer
        /// reads none: APNs says why in the body.
        public var keepsResponseHeaders = true

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

        /// Takes what the connection's state published; `readyAt` is stamped the first time it is ready, on the
        /// real clock (the pool compares it with `ContinuousClock.now`, while the state runs on the loop's clock).
        mutating func apply(_ snapshot: ClientCore.State.Snapshot) {
            if snapshot.isReady && readyAt == nil { readyAt = .now }
            isReady = snapshot.isReady
            isGoingAway = snapshot.isGoingAway
            isClosed = snapshot.isClosed
            streamLimit = snapshot.streamLimit
        }
    }

    /// A request `send` hands the loop, and whom its result goes to.
    private struct Outgoing {
        let request: HTTP2Request
        let completion: Completion
    }

    /// What other threads and the loop share: the status, and the requests sent since the loop last took them.
    private struct Shared {
        var status = Status()
        var outbox: [Outgoing] = []
    }

    private let core: Mutex<ClientCore?>
    private let shared = Mutex(Shared())
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
    ///
    /// Requests sent in a burst (a deliverer sends hundreds a turn) reach the loop in one task: the one that finds
    /// the outbox empty queues the task, which takes every request sent until it runs. A task per request was a
    /// closure allocated here and freed on the loop (malloc's arena lock between the two threads) and two more locks
    /// a request. Once `close` was called, each request goes as its own task again, queued behind the close's, so it
    /// is refused exactly as before.
    public func send(_ request: HTTP2Request, completion: @escaping Completion) {
        guard !closeRequested.load(ordering: .relaxed) else {
            shared.withLock { $0.status.inFlight += 1 }
            loop.execute { [self] in enqueue([Outgoing(request: request, completion: completion)]) }
            return
        }
        let first = shared.withLock { shared -> Bool in
            shared.status.inFlight += 1
            shared.outbox.append(Outgoing(request: request, completion: completion))
            return shared.outbox.count == 1
        }
        if first, !loop.execute({ [self] in enqueue(takeOutbox()) }) {
            // The loop has ended (its pool shut down), so nothing will take the outbox: its requests are dropped, as
            // a task the loop refuses always was, rather than kept (each completion holds this connection).
            _ = takeOutbox()
        }
    }

    private func takeOutbox() -> [Outgoing] {
        shared.withLock { shared in
            var taken: [Outgoing] = []
            // The requests leave in the outbox's buffer; the empty one, as large, stays for the next burst.
            taken.reserveCapacity(shared.outbox.count)
            swap(&taken, &shared.outbox)
            return taken
        }
    }

    /// A loop task: hands `outgoing` to the connection, or refuses them if it is gone.
    private func enqueue(_ outgoing: [Outgoing]) {
        guard let connection = core.withLock({ $0 }) else {
            for request in outgoing { finished(request.completion, .failure(.refused)) }
            return
        }
        for request in outgoing { connection.enqueue(request.request, completion: request.completion) }
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

    public var currentStatus: Status { shared.withLock { $0.status } }

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

    func updateStatus(_ change: (inout Status) -> Void) { shared.withLock { change(&$0.status) } }

    func finished(_ completion: Completion, _ result: Result<HTTP2Response, HTTP2Failure>) {
        shared.withLock { $0.status.inFlight -= 1 }
        completion(result)
    }

    func markClosed() {
        shared.withLock {
            $0.status.isClosed = true
            $0.status.isReady = false
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

/// The loop-confined side of a client connection: it feeds `HTTP2ClientConnectionState` the events the transport,
/// nghttp2 and the owner produce, and performs the actions it returns. Every decision is in the state; this class
/// only does the I/O.
///
/// nghttp2 callbacks (`HTTP2SessionDelegate`) only settle streams and record what is wanted; submitting waiting
/// requests and closing once drained happen in `runDeferredWork()`, which the transport runs after the library
/// call returned (see `HTTP2Transport`).
final class ClientCore: HTTP2Transport, HTTP2SessionDelegate, @unchecked Sendable {
    // @unchecked Sendable: created on and confined to `owner.loop` (every method runs there); the Sendable
    // conformance exists only so the owner can keep it in a Mutex between loop tasks.

    typealias State = HTTP2ClientConnectionState<HTTP2Request, Reply>

    /// Whom a request's result goes to. A struct around the caller's closure, not the closure itself as the state's
    /// `Reply`: a function stored as a generic parameter is wrapped in a reabstraction thunk, an allocation and a
    /// free (and a call through the thunk) on every request (callgrind, nineteenth session).
    struct Reply {
        let completion: HTTP2ClientConnection.Completion
    }
    typealias Timer = State.Timer

    /// Strong on purpose: a connection lives until it has closed, even if its owner dropped it; `released()`
    /// breaks the owner → core → owner cycle once the transport is closed.
    private let owner: HTTP2ClientConnection
    /// Our decisions (the transport's own `state` is where the bytes are).
    private var connection: State
    private let timers: TimerSlots<Timer>
    /// The pseudo-headers before `:path` for the method of the last request (every request is a POST to APNs).
    private var pseudoHeaders: (method: String, block: HTTP2HeaderBlock)
    private let keepsResponseHeaders: Bool

    init(owner: HTTP2ClientConnection, fd: Int32, tls: TLSConnection) {
        self.owner = owner
        keepsResponseHeaders = owner.configuration.keepsResponseHeaders
        timers = TimerSlots(loop: owner.loop)
        pseudoHeaders = Self.pseudoHeaders("POST", authority: owner.configuration.authority)
        connection = State(configuration: owner.configuration, now: owner.loop.now)
        super.init(loop: owner.loop, fd: fd, tls: tls)
    }

    func start() {
        attach(connecting: true)
        perform(connection.started())
    }

    /// Timers this connection holds now (tests: bounded by `Timer.allCases.count`, however long it lives).
    var timersHeld: Int { timers.count }
    var pingOutstanding: Bool { connection.pingOutstanding }

    override func socketConnected() { connection.connected() }

    override func handshakeCompleted() throws {
        guard tls.negotiatedProtocol == "h2" else { throw TLSError(message: "server did not agree to HTTP/2 (ALPN)") }
        let session = try HTTP2Session(role: .client, delegate: self)
        self.session = session
        perform(connection.sessionUp(streamLimit: session.peerMaxConcurrentStreams, now: loop.now))
    }

    /// A loop task: queue `request` and settle.
    func enqueue(_ request: HTTP2Request, completion: @escaping HTTP2ClientConnection.Completion) {
        // A transport already closing (nghttp2 ended the session on a protocol error) takes nothing more, though no
        // event told the state yet: the close is under way and would only fail the request later.
        guard !isClosingOrClosed else { return owner.finished(completion, .failure(.refused)) }
        perform(connection.requestQueued(request, reply: Reply(completion: completion), now: loop.now))
        settleAtEndOfTurn()
    }

    private var isClosingOrClosed: Bool {
        switch state {
        case .connecting, .handshaking, .open: false
        case .closing, .draining, .lingering, .closed: true
        }
    }

    override func runDeferredWork() {
        perform(connection.requestsToSubmit(now: loop.now))
        perform(connection.closeIfDrained(transportOpen: isOpen))
    }

    /// A loop task: no new requests; GOAWAY and close once nothing is in flight (or at once with `immediately`).
    func shutdown(immediately: Bool) {
        perform(connection.closeRequested(immediately: immediately, transportOpen: isOpen))
    }

    func setNextStreamID(_ id: Int32) { session?.setNextStreamID(id) }

    // MARK: Performing the state's actions

    private func perform(_ actions: [State.Action]) {
        for action in actions {
            switch action {
            case .submit(let submission): submit(submission)
            case .complete(let reply, let result): owner.finished(reply.completion, result)
            case .resetStream(let id):
                session?.resetStream(id, errorCode: HTTP2Session.cancel)
                wantFlush()
            case .writeOut:
                wantFlush()
                settle()
            case .sendPing:
                session?.submitPing()
                wantFlush()
            case .sendGoAway: session?.submitGoAway()
            case .closeGracefully(let reason): closeGracefully(reason: reason)
            case .closeNow(let reason): fail(reason)
            case .abort(let reason): abort(reason)
            case .arm(let timer, let delay):
                // An action left over after the close (a close inside `writeOut`) arms nothing on a closed connection.
                guard !isClosed else { continue }
                timers.set(timer, after: delay) { [weak self] in self?.timerFired(timer) }
            case .cancel(let timer): timers.cancel(timer)
            case .report(let event): owner.onEvent(event)
            case .publish(let snapshot): owner.updateStatus { $0.apply(snapshot) }
            }
        }
    }

    private func timerFired(_ timer: Timer) {
        guard !isClosed else { return }
        perform(connection.timerFired(timer, now: loop.now))
    }

    private func submit(_ submission: State.Submission) {
        guard let session else { return perform(connection.submitFailed(submission, streamIDsUsedUp: false)) }
        let request = submission.request
        if request.method != pseudoHeaders.method { pseudoHeaders = Self.pseudoHeaders(request.method, authority: owner.configuration.authority) }
        do {
            let id = try session.submitRequest(
                pseudoHeaders: pseudoHeaders.block, path: request.path, headers: request.headers, body: request.body)
            connection.streamOpened(id, for: submission, now: loop.now)
            wantFlush()
        } catch {
            let usedUp = (error as? HTTP2Session.Failure)?.streamIDsUsedUp ?? false
            perform(connection.submitFailed(submission, streamIDsUsedUp: usedUp))
        }
    }

    /// `:method`, `:scheme` and `:authority`, the same for every request of a method on this connection: laid out
    /// once, not per request.
    private static func pseudoHeaders(_ method: String, authority: String) -> (method: String, block: HTTP2HeaderBlock) {
        var block = HTTP2HeaderBlock()
        block.append(":method", method)
        block.append(":scheme", "https")
        block.append(":authority", authority)
        return (method, block)
    }

    // MARK: HTTP2SessionDelegate (called from inside nghttp2: the state's answers here never write out)

    func streamOpened(_ stream: Int32) {}

    func headerReceived(_ stream: Int32, name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) {
        if name.count == Self.statusName.utf8CodeUnitCount, memcmp(name.baseAddress!, Self.statusName.utf8Start, name.count) == 0 {
            connection.statusReceived(stream, status: Self.decimal(value))
        } else if keepsResponseHeaders {
            connection.headerReceived(stream, name: String(decoding: name, as: UTF8.self), value: String(decoding: value, as: UTF8.self))
        }
    }

    /// Compared with `memcmp`: `elementsEqual` with a static array cost more than the rest of reading the status.
    private static let statusName: StaticString = ":status"

    /// `:status`'s digits (three, from any server that speaks HTTP), read without a String; 0 for anything else (no valid response, as `Int(value) ?? 0`).
    static func decimal(_ bytes: UnsafeRawBufferPointer) -> Int {
        guard (1...9).contains(bytes.count) else { return 0 }
        var number = 0
        for byte in bytes {
            guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) else { return 0 }
            number = number * 10 + Int(byte - UInt8(ascii: "0"))
        }
        return number
    }

    func dataReceived(_ stream: Int32, _ bytes: UnsafeRawBufferPointer) -> Bool {
        connection.dataReceived(stream, bytes)
    }

    func streamEnded(_ stream: Int32) { complete(connection.streamEnded(stream, now: loop.now)) }

    func streamClosed(_ stream: Int32, errorCode: UInt32) { complete(connection.streamClosed(stream, errorCode: errorCode)) }

    private func complete(_ completion: State.Completion?) {
        if let completion { owner.finished(completion.reply.completion, completion.result) }
    }

    func goAwayReceived(lastStreamID: Int32, errorCode: UInt32, debugData: [UInt8]) {
        perform(connection.goAwayReceived(lastStreamID: lastStreamID, reason: String(decoding: debugData, as: UTF8.self)))
    }

    func settingsReceived() {
        perform(connection.settingsReceived(streamLimit: session?.peerMaxConcurrentStreams ?? 1))
    }

    func pingAcknowledged() { perform(connection.pingAcknowledged(now: loop.now)) }

    override func transportClosed(reason: String) {
        perform(connection.transportClosed(reason: reason))
        // Drop the owner's reference after this call returns; `self` stays alive until then.
        loop.execute { [owner] in owner.released() }
    }
}
