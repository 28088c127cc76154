import Foundation

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
    func enqueue(_ request: consuming HTTP2Request, completion: @escaping HTTP2ClientConnection.Completion) {
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

    private func perform(_ actions: consuming [State.Action]) {
        for action in Moving(actions) {
            switch consume action {
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
            let id = try session.submitRequest(pseudoHeaders: pseudoHeaders.block, request: request)
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
