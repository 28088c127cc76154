import Synchronization

/// The last time a loop went round, for liveness (`/livez`) and systemd's watchdog: a loop beats on every turn,
/// including idle turns (its wait has a deadline), so a beat older than the watchdog interval means the loop is
/// wedged — not idle. Lock-free: a beat is one relaxed store.
public final class Heartbeat: Sendable {
    /// Monotonic nanoseconds since `origin` of the last beat.
    private let last = Atomic<Int64>(0)
    private static let origin = ContinuousClock.now

    public init() { beat() }

    /// The loop went round. From the loop's thread.
    public func beat() { last.store(Self.elapsed(ContinuousClock.now), ordering: .relaxed) }

    /// Time since the last beat. From any thread.
    public var age: Duration {
        .nanoseconds(Self.elapsed(ContinuousClock.now) - last.load(ordering: .relaxed))
    }

    private static func elapsed(_ instant: ContinuousClock.Instant) -> Int64 {
        let (seconds, attoseconds) = (instant - origin).components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }
}
