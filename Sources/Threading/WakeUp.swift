import Foundation
import Synchronization

/// Wakes one thread that sleeps until there is work or a deadline passes. A `signal()` sent while the thread is
/// busy is kept, so the next `wait` returns at once and no wake-up is lost; several signals before a wait count as
/// one. `signal()` only takes the lock and wakes the kernel futex when the thread is really asleep: a futex wake per
/// event was a visible cost at ten thousand events a second. One waiting thread at a time.
public final class WakeUp: Sendable {
    private let condition = NSCondition()
    private let signalled = Atomic<Bool>(false)
    private let sleeping = Atomic<Bool>(false)

    public init() {}

    /// Wakes the waiting thread, or makes its next `wait` return at once. From any thread.
    public func signal() {
        // Sequentially consistent, with the waiter's store of `sleeping` and exchange of `signalled`: either this
        // thread sees it asleep (and takes the lock, which the waiter holds until it is inside `wait`), or the
        // waiter sees the signal before it sleeps.
        signalled.store(true, ordering: .sequentiallyConsistent)
        guard sleeping.load(ordering: .sequentiallyConsistent) else { return }
        condition.lock()
        condition.signal()
        condition.unlock()
    }

    /// Sleeps until signalled or until `deadline` (nil: no deadline). Returns whether it was signalled; a signal
    /// sent since the last `wait` returned counts.
    @discardableResult
    public func wait(until deadline: ContinuousClock.Instant?) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        sleeping.store(true, ordering: .sequentiallyConsistent)
        defer { sleeping.store(false, ordering: .sequentiallyConsistent) }
        while !signalled.exchange(false, ordering: .sequentiallyConsistent) {
            if let deadline {
                let remaining = deadline - .now
                let date = Date(
                    timeIntervalSinceNow: Double(remaining.components.seconds)
                        + Double(remaining.components.attoseconds) / 1e18)
                if !condition.wait(until: date) { return signalled.exchange(false, ordering: .sequentiallyConsistent) }
            } else {
                condition.wait()
            }
        }
        return true
    }
}
