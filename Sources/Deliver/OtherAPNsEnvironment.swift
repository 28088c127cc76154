import Common
import Dispatch
import Synchronization

/// The APNs environment the relay is not configured for (SPEC §4: sandbox tokens of TestFlight and Xcode builds
/// next to App Store installs, or the reverse). Its connections open on first use — most relays never need them —
/// and close after `idleTimeout` without a request, so a relay that once resent a push does not keep them forever.
public final class OtherAPNsEnvironment: Sendable {
    public let environment: Settings.APNsEnvironment
    public let idleTimeout: Duration
    private let open: @Sendable () -> APNsConnectionPool
    private let state = Mutex<(pool: APNsConnectionPool?, lastUsed: ContinuousClock.Instant)>((nil, .now))
    /// Idle pools being shut down in the background; `shutdown()` waits for them.
    private let closing = DispatchGroup()

    /// - Parameter open: makes and starts the pool for this environment.
    public init(
        environment: Settings.APNsEnvironment, idleTimeout: Duration = .seconds(300),
        open: @escaping @Sendable () -> APNsConnectionPool
    ) {
        self.environment = environment
        self.idleTimeout = idleTimeout
        self.open = open
    }

    /// The pool, opened now if it was not (its connections then take a moment to come up).
    public func pool() -> APNsConnectionPool {
        let existing = state.withLock { state -> APNsConnectionPool? in
            state.lastUsed = .now
            return state.pool
        }
        if let existing { return existing }
        let opened = open()
        let (kept, extra) = state.withLock { state -> (APNsConnectionPool, APNsConnectionPool?) in
            if let raced = state.pool { return (raced, opened) }
            state.pool = opened
            return (opened, nil)
        }
        extra?.shutdown()
        return kept
    }

    public var isOpen: Bool { state.withLock { $0.pool != nil } }

    /// Closes the pool when nothing used it for `idleTimeout` (far longer than a request may take to answer). The
    /// caller is the delivery loop: the pool is shut down on another thread, as its shutdown waits for a reconnect
    /// under way (a DNS lookup and connect that may block for seconds).
    public func closeIfIdle() {
        let idle = state.withLock { state -> APNsConnectionPool? in
            guard let pool = state.pool, ContinuousClock.now - state.lastUsed >= idleTimeout else { return nil }
            state.pool = nil
            return pool
        }
        if let idle { DispatchQueue.global().async(group: closing) { idle.shutdown() } }
    }

    /// Closes the pool, and waits for idle ones still closing in the background.
    public func shutdown() {
        state.withLock { state -> APNsConnectionPool? in
            defer { state.pool = nil }
            return state.pool
        }?.shutdown()
        closing.wait()
    }
}
