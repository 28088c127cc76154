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
        /// A loop task that takes the outbox is queued (`wakeLoop`); `takeOutbox` clears it.
        var takePending = false

        /// Whether the caller must queue the task that takes the outbox: requests wait and none is queued yet.
        mutating func claimTakeIfWaiting() -> Bool {
            guard !outbox.isEmpty, !takePending else { return false }
            takePending = true
            return true
        }
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
    /// Requests sent in a burst reach the loop in one task: the first sent while no such task is queued queues it,
    /// and it takes every request sent until it runs (`sendDeferringWake` leaves the queuing to `flush`). A task per
    /// request was a closure allocated here and freed on the loop (malloc's arena lock between the two threads) and
    /// two more locks a request. Once `close` was called, each request goes as its own task again, queued behind the
    /// close's, so it is refused exactly as before.
    public func send(_ request: HTTP2Request, completion: @escaping Completion) {
        send(request, wakingTheLoop: true, completion: completion)
    }

    /// Sends `request` without waking the event loop: it waits in the outbox until the next `send` or `flush` wakes
    /// the loop, which then takes every request waiting. For a sender with a burst in hand (a deliverer's turn),
    /// which calls `flush` once after it: a wake-up per request taken was an `eventfd` write that woke the loop,
    /// which took a few requests and slept again, several times a burst.
    public func sendDeferringWake(_ request: HTTP2Request, completion: @escaping Completion) {
        send(request, wakingTheLoop: false, completion: completion)
    }

    /// Wakes the loop for the requests `sendDeferringWake` left in the outbox, if any.
    public func flush() {
        if shared.withLock({ $0.claimTakeIfWaiting() }) { wakeLoop() }
    }

    private func send(_ request: HTTP2Request, wakingTheLoop: Bool, completion: @escaping Completion) {
        guard !closeRequested.load(ordering: .relaxed) else {
            shared.withLock { $0.status.inFlight += 1 }
            loop.execute { [self] in enqueue([Outgoing(request: request, completion: completion)]) }
            return
        }
        let wake = shared.withLock { shared -> Bool in
            shared.status.inFlight += 1
            shared.outbox.append(Outgoing(request: request, completion: completion))
            return wakingTheLoop && shared.claimTakeIfWaiting()
        }
        if wake { wakeLoop() }
    }

    /// Queues the loop task that takes the outbox (at most one is queued at a time).
    private func wakeLoop() {
        if !loop.execute({ [self] in enqueue(takeOutbox()) }) {
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
            shared.takePending = false
            return taken
        }
    }

    /// A loop task: hands `outgoing` to the connection, or refuses them if it is gone.
    private func enqueue(_ outgoing: consuming [Outgoing]) {
        guard let connection = core.withLock({ $0 }) else {
            for request in outgoing { finished(request.completion, .failure(.refused)) }
            return
        }
        for next in Moving(outgoing) { connection.enqueue(next.request, completion: next.completion) }
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

    /// Tests: requests handed over that the loop has not taken yet.
    package var requestsWaitingForTheLoop: Int { shared.withLock { $0.outbox.count } }

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
