import Foundation
import PostgresDriver
import Synchronization
import Threading

/// The deliverer's LISTEN connection (`PostgresListener`) on a thread of its own, asleep in poll(2) on the
/// connection's socket. A NOTIFY wakes it: it drains the socket, counts what arrived (`changes`, which
/// `PostgresStore.changeCounter()` returns) and calls `wake`, so a deliverer hears of a job when its transaction
/// commits rather than at its next poll of the counter, 5 to 25 ms later (issue 39: most of PostgreSQL's webhook → APNs
/// p99 at 1,000 webhooks/s).
///
/// WHY the thread owns the connection outright, from opening to closing: a `PGconn` must not be used by two threads
/// at once. A thread that only watched the socket while the delivery thread drained it under a lock would have to
/// follow the descriptor through every reconnect, and could poll one closed meanwhile (or reused for another
/// socket). Here connecting, LISTEN, reading, reconnecting after a failure or a failover all happen on this thread;
/// other threads only read two values behind a `Mutex`.
final class PostgresListenerThread: Sendable {
    /// How long the thread sleeps in poll(2) at most before it looks at the store's `FailoverSignal` (another of the
    /// store's connections found its server read-only: the LISTEN connection must go to the new primary, whose
    /// writers it would otherwise never hear). The only periodic wake-up; cheap (one `recv` that finds nothing).
    static let failoverCheckInterval: Duration = .milliseconds(100)

    private struct Published {
        var changes: Int64
        /// Why the last attempt to connect or read failed, until one succeeds (`changes()` throws it, as the polled
        /// counter did, so the deliverer counts the database as failing).
        var failure: StoreError?
        var wake: (@Sendable () -> Void)?
    }

    /// How long `stop()` waits for the thread to end: a connect under way finishes first (`connect_timeout` per
    /// host), and a frozen server may never answer the LISTEN. A deliverer's shutdown must not hang on it: its leases
    /// are released by then, and the thread ends by itself once the wait it is in does.
    static let stopWait: Duration = .seconds(5)

    private let published: Mutex<Published>
    private let stopRequest: PGInterrupt
    private let ended = DispatchSemaphore(value: 0)
    private let alive = Atomic<Bool>(true)

    /// Starts the thread, which connects at once. `startingAt`: the count a previous thread of the store reached, so
    /// the counter never goes back.
    /// Throws when the process cannot make the pipe that stops it (out of file descriptors).
    init(conninfo: String, options: PGConnection.Options, failover: FailoverSignal, startingAt: Int64) throws(StoreError) {
        do {
            stopRequest = try PGInterrupt()
        } catch {
            throw StoreError(.unavailable, "the LISTEN thread: \(error.message)")
        }
        published = Mutex(Published(changes: startingAt))
        Thread.start(named: "postgres-listen") { [self] in run(conninfo: conninfo, options: options, failover: failover, base: startingAt) }
    }

    /// The count of notifications (and reconnects) so far; throws while the server cannot be reached.
    func changes() throws(StoreError) -> Int64 {
        let (changes, failure) = published.withLock { ($0.changes, $0.failure) }
        if let failure { throw failure }
        return changes
    }

    /// The count so far, failing or not.
    var lastChanges: Int64 { published.withLock { $0.changes } }

    /// From now on, called on this thread each time the count moves (nil: nobody).
    func setWake(_ wake: (@Sendable () -> Void)?) {
        published.withLock { $0.wake = wake }
    }

    /// Whether the thread still runs.
    var isRunning: Bool { alive.load(ordering: .acquiring) }

    /// Asks the thread to end, without waiting: it ends at once unless it is connecting (at most the conninfo's
    /// `connect_timeout` per host) or waiting for the answer to its LISTEN (`statement_timeout` at most).
    func requestStop() { stopRequest.raise() }

    /// Ends the thread and waits for it, at most `stopWait`: the connection is closed when this returns, unless the
    /// thread was stuck in a connect or a LISTEN (it then closes it when that ends). Once only.
    func stop() {
        requestStop()
        let (seconds, attoseconds) = Self.stopWait.components
        _ = ended.wait(timeout: .now() + .nanoseconds(Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000)))
    }

    private func run(conninfo: String, options: PGConnection.Options, failover: FailoverSignal, base: Int64) {
        defer {
            alive.store(false, ordering: .releasing)
            ended.signal()
        }
        // Made here, so that it is never touched by another thread (and closed here, when `run` returns).
        let listener = PostgresListener(conninfo: conninfo, options: options, failover: failover)
        var announced = base
        var failuresInARow = 0
        while !stopRequest.isRaised {
            do {
                let changes = base + (try listener.poll())
                failuresInARow = 0
                let wake = published.withLock { published in
                    published.changes = changes
                    published.failure = nil
                    return published.wake
                }
                if changes != announced {
                    announced = changes
                    wake?()
                }
                listener.waitForNotification(orInterrupt: stopRequest, timeout: Self.failoverCheckInterval)
            } catch {
                failuresInARow += 1
                published.withLock { $0.failure = PostgresStore.storeError(error) }
                stopRequest.wait(until: retryAt(listener, failuresInARow: failuresInARow))
            }
        }
    }

    /// When to try again after a failure: when the link's backoff allows a connection attempt; a failure that started
    /// none (the connection broke: the link reconnects at once) is tried again at once the first time, then after
    /// 100 ms, so that a fault that repeats cannot spin the thread.
    private func retryAt(_ listener: PostgresListener, failuresInARow: Int) -> ContinuousClock.Instant {
        if listener.isBackingOff { return listener.reconnectAt }
        return failuresInARow == 1 ? .now : .now + .milliseconds(100)
    }
}
