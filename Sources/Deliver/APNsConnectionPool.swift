import Common
import Dispatch
import HTTP2
import Synchronization

/// `APNS_CONNECTIONS` persistent HTTP/2 connections to APNs, all on one event loop, reconnecting with backoff
/// (1 s doubling to 60 s over failed attempts in a row). A connection that was up for `stableAfter` and then closes
/// (APNs ends idle connections, a network blip) did not fail: the count starts again, it is replaced at once and
/// does not count towards `allDown`. Requests fill the first connection with a free stream (`pick`), so a server's
/// per-connection stream limit (APNs starts token connections at 1) is respected.
///
/// One loop, not one per connection: requests go to one thread, woken once per burst, and no thread per idle
/// connection competes for the cores. With the connections spread, draining 100,000 pushes cost 24.4 µs of the
/// deliverer's CPU a push on one loop against 25.5 on a loop each (`bench/deliver_ab.py`, four alternated rounds,
/// thirtieth session). The loop spends about 5 µs of CPU a push, so one core would carry about 200,000 pushes/s,
/// several times what a delivery thread claims and records (about 18 µs a push).
public final class APNsConnectionPool: Sendable {
    struct Slot: Sendable {
        var connection: HTTP2ClientConnection?
        var failures = 0
        /// Which connection of this slot is current; events of an older one (still draining) are ignored.
        var generation = 0
        /// The current connection's end (GOAWAY or close, whichever came first) was counted and its replacement
        /// scheduled: the other event of the same end changes nothing.
        var ended = false
    }

    private let configuration: HTTP2ClientConnection.Configuration
    private let tls: TLSContext
    private let loop: EventLoop
    private let logger: Logger
    private let onChange: @Sendable () -> Void
    private let slots: Mutex<[Slot]>
    /// Connections replaced in their slot (recycled, gone away) that may still be finishing their streams: a
    /// shutdown closes them too, or one still draining would outlive the stopped loop with its socket.
    private let replaced = Mutex<[HTTP2ClientConnection]>([])
    private let stopped = Atomic<Bool>(false)
    private let reconnects = DispatchQueue(label: "apns.reconnect")
    private let backoff = Backoff(base: .seconds(1), cap: .seconds(60))
    /// How long a connection must have been up for its close not to count as a failure. One that falls sooner (a
    /// server that accepts and drops) backs off like one that never came up, instead of reconnecting in a loop.
    private let stableAfter: Duration

    public init(
        configuration: HTTP2ClientConnection.Configuration, connections: Int, tls: TLSContext, logger: Logger,
        stableAfter: Duration = .seconds(1), loopName: String = "apns", onChange: @escaping @Sendable () -> Void
    ) {
        loop = EventLoop(name: loopName)
        self.stableAfter = stableAfter
        self.configuration = configuration
        self.tls = tls
        self.logger = logger
        self.onChange = onChange
        slots = Mutex(Array(repeating: Slot(), count: connections))
    }

    public func start() {
        for index in 0..<slots.withLock({ $0.count }) { open(index, replacing: nil) }
    }

    /// The connection a push goes to: the first, in slot order, with a free stream, unless one is held to a single
    /// stream with nothing in flight; nil when none has room. Once per push.
    ///
    /// Filled in order, not spread by the most free streams: one busy connection costs less than two half busy ones.
    /// Drains of 100,000 pushes, four alternated rounds on one loop (thirtieth session, docs/performance.md): 24.1 µs
    /// of the deliverer's CPU a push against 24.4 spread over the two, and 45,400–47,500 pushes/s against
    /// 39,600–41,100, the simulator on the same two cores then running one of its loops instead of both.
    ///
    /// APNs holds a new connection to one stream until a push on it is accepted, and drops one back to a single stream
    /// after a rejected push. Such a connection with nothing in flight takes the push, so that its acceptance raises
    /// the limit: a spare is at full width before the first fails or is lowered, and a lowered one recovers at once.
    /// Filled strictly in order, the spare stayed at one stream, and the deliverer had about two streams until a push
    /// on it came back.
    public func pick() -> HTTP2ClientConnection? {
        slots.withLock { slots in
            var first: HTTP2ClientConnection?
            for slot in slots {
                guard let connection = slot.connection else { continue }
                let status = connection.currentStatus
                guard status.freeStreams > 0 else { continue }
                if status.streamLimit == 1 && status.inFlight == 0 { return connection }
                if first == nil { first = connection }
            }
            return first
        }
    }

    /// Streams free across all connections.
    public var freeStreams: Int { slots.withLock { $0.compactMap(\.connection).map(\.currentStatus.freeStreams).reduce(0, +) } }
    public var readyConnections: Int {
        slots.withLock { $0.compactMap(\.connection).filter { $0.currentStatus.isReady && !$0.currentStatus.isClosed }.count }
    }
    /// True while no connection is up and the last attempts failed.
    public var allDown: Bool {
        slots.withLock { slots in
            slots.allSatisfy { slot in slot.failures > 0 && !(slot.connection.map { $0.currentStatus.isReady } ?? false) }
        }
    }

    /// Connection attempts in a row that failed (never came up, or fell within `stableAfter`), on the slot with the
    /// most: what its reconnect backoff doubles with.
    public var consecutiveFailures: Int { slots.withLock { $0.map(\.failures).max() ?? 0 } }

    /// Replaces `connection` with a fresh one (after ExpiredProviderToken: APNs wedges a connection whose token
    /// it rejected). The old one finishes its streams and closes.
    public func recycle(_ connection: HTTP2ClientConnection) {
        let index = slots.withLock { slots in slots.firstIndex { $0.connection === connection } }
        guard let index else { return }
        connection.close()
        open(index, replacing: connection)
    }

    /// Replaces every connection (the stall detector's reset): whatever state they were in, fresh ones follow.
    public func recycleAll() {
        let connections = slots.withLock { $0.compactMap(\.connection) }
        for connection in connections { recycle(connection) }
    }

    /// Closes every connection at once (their open requests fail) and stops the loop. Only the first call acts.
    public func shutdown() {
        guard !stopped.exchange(true, ordering: .relaxed) else { return }
        // First let a connect under way finish (DNS and connect() run on `reconnects`): its connection then exists
        // on its loop and is closed below. Closed before, it had nothing to close yet, came up after, and outlived
        // the stopped loop with its socket.
        reconnects.sync {}
        let connections = slots.withLock { $0.compactMap(\.connection) } + replaced.withLock { $0 }
        for connection in connections { connection.close(immediately: true) }
        loop.shutdown()
    }

    /// Puts a new connection in slot `index` if it still holds `old`: a recycle (delivery thread) and a scheduled
    /// replacement (`reconnects`) may both mean to replace the same connection, and only one may, or the other's
    /// connection would live on untracked, never closed.
    private func open(_ index: Int, replacing old: HTTP2ClientConnection?) {
        guard !stopped.load(ordering: .relaxed) else { return }
        let opened = slots.withLock { slots -> HTTP2ClientConnection? in
            guard slots[index].connection === old else { return nil }
            slots[index].generation += 1
            slots[index].ended = false
            let generation = slots[index].generation
            let connection = HTTP2ClientConnection(configuration, tls: tls, loop: loop) { [weak self] event in
                self?.event(event, slot: index, generation: generation)
            }
            slots[index].connection = connection
            return connection
        }
        if opened != nil, let old {
            replaced.withLock { replaced in
                replaced.removeAll { $0.currentStatus.isClosed }
                replaced.append(old)
            }
        }
        // DNS and connect() block: never on an event loop.
        if let opened { reconnects.async { opened.connect() } }
    }

    private func event(_ event: HTTP2ClientConnection.Event, slot index: Int, generation: Int) {
        guard !stopped.load(ordering: .relaxed), slots.withLock({ $0[index].generation == generation }) else {
            onChange()
            return
        }
        switch event {
        case .ready:
            // Failures are forgotten when a connection that stayed up closes (below), not here: one that falls right
            // after coming up keeps counting, and its backoff keeps doubling.
            logger.info("APNs connection ready", ["conn.id": String(index)])
        case .streamLimitChanged:
            break
        case .goingAway(let reason):
            logger.info("APNs connection going away", ["conn.id": String(index), "apns.reason": reason])
            connectionEnded(index, reason: "GOAWAY \(reason)")
        case .closed(let reason):
            connectionEnded(index, reason: reason)
        }
        onChange()
    }

    /// Counts the end of the slot's connection once (a GOAWAY and the close that follows it are one end) and
    /// schedules its replacement: at once after a connection that stayed up, after the backoff otherwise — a server
    /// that sends GOAWAY right after SETTINGS must not get a new connection every handshake (APNs treats rapid
    /// reconnects as an attack).
    private func connectionEnded(_ index: Int, reason: String) {
        let failures = slots.withLock { slots -> Int? in
            guard !slots[index].ended else { return nil }
            slots[index].ended = true
            // `isReady` is already false after a close; when it became ready says whether it had been up.
            let readyAt = slots[index].connection?.currentStatus.readyAt
            let wasUp = readyAt.map { ContinuousClock.now - $0 >= stableAfter } ?? false
            slots[index].failures = wasUp ? 0 : slots[index].failures + 1
            return slots[index].failures
        }
        guard let failures else { return }
        if failures > 0 {
            logger.warning("APNs connection failed", ["conn.id": String(index), "error": reason, "attempt": String(failures)])
        }
        replaceLater(index, after: failures == 0 ? .zero : .milliseconds(backoff.ceilingMillis(afterAttempt: failures)))
    }

    private func replaceLater(_ index: Int, after delay: Duration) {
        guard !stopped.load(ordering: .relaxed) else { return }
        reconnects.asyncAfter(deadline: .now() + delay.seconds) { [weak self] in
            guard let self, !self.stopped.load(ordering: .relaxed) else { return }
            let current = self.slots.withLock { $0[index].connection }
            // Only replace a connection that is closed or going away (a recycle may have replaced it already).
            if let current, !current.currentStatus.isClosed, !current.currentStatus.isGoingAway { return }
            self.open(index, replacing: current)
        }
    }

    public var connectionCount: Int { slots.withLock { $0.compactMap(\.connection).filter { !$0.currentStatus.isClosed }.count } }
}
