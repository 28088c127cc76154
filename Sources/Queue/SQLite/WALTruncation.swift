import Foundation
import SQLiteDriver
import Synchronization
import Threading

/// When the write-ahead log is truncated to zero bytes (`PRAGMA wal_checkpoint(TRUNCATE)`).
///
/// Why: `secure_delete` zeroes a deleted row in its page, but the page's earlier versions — holding the delivered
/// notification text — stay in the `-wal` file until the WAL is truncated, and SQLite's automatic checkpoints only
/// ever *restart* the WAL (overwriting it from the start), never truncate it. So the store truncates it itself:
/// once writes have paused for `idleDelay` (the common case: a push is delivered and the queue goes quiet), and
/// at least every `interval` while writes keep coming, so delivered content leaves the disk within `interval`.
struct WALTruncationPolicy: Sendable, Equatable {
    /// The longest a written page may wait in the WAL. WAL_TRUNCATE_INTERVAL; defaults to 1 minute.
    var interval: Duration
    /// A pause in writes this long counts as idle; at most `interval`.
    var idleDelay: Duration

    init(interval: Duration) {
        self.interval = interval
        idleDelay = min(interval, .seconds(1))
    }

    /// Whether to truncate now, given when the last write committed and when the WAL was last truncated (nil: not
    /// since the last write, which is the only state in which there is anything to truncate).
    func shouldTruncate(
        now: ContinuousClock.Instant, lastWrite: ContinuousClock.Instant?,
        lastTruncation: ContinuousClock.Instant
    ) -> Bool {
        guard let lastWrite, lastWrite >= lastTruncation else { return false }
        return now - lastWrite >= idleDelay || now - lastTruncation >= interval
    }
}

/// Runs a `WALTruncationPolicy` on a thread of its own for one store: it wakes when a write commits (to start the
/// idle countdown) and at the policy's deadlines, and calls `truncate` (which takes the store's writer connection).
final class WALTruncator: Sendable {
    private struct State {
        var lastWrite: ContinuousClock.Instant?
        var lastTruncation = ContinuousClock.now
        var stopping = false
    }

    private let policy: WALTruncationPolicy
    private let state = Mutex(State())
    private let wakeUp = WakeUp()
    private let stopped = DispatchSemaphore(value: 0)

    /// Starts the thread. `truncate` runs on it and returns whether the WAL was truncated (false: a reader in
    /// another process still needed it; tried again at the next deadline).
    init(policy: WALTruncationPolicy, truncate: @escaping @Sendable () -> Bool) {
        self.policy = policy
        Thread.start(named: "wal-truncate") { [self] in run(truncate) }
    }

    /// A write transaction committed.
    func noteWrite() {
        let first = state.withLock { state -> Bool in
            defer { state.lastWrite = .now }
            return state.lastWrite.map { $0 < state.lastTruncation } ?? true
        }
        // Only the first write after a truncation needs to start the countdown; later ones just move it.
        if first { wakeUp.signal() }
    }

    /// Stops the thread (after a last truncation if one is due). Blocks until it has ended.
    func stop() {
        state.withLock { $0.stopping = true }
        wakeUp.signal()
        stopped.wait()
    }

    private func run(_ truncate: @Sendable () -> Bool) {
        while true {
            let (due, wait, stopping) = state.withLock { state -> (Bool, Duration?, Bool) in
                let now = ContinuousClock.now
                let due = policy.shouldTruncate(now: now, lastWrite: state.lastWrite, lastTruncation: state.lastTruncation)
                guard let lastWrite = state.lastWrite, lastWrite >= state.lastTruncation else { return (due, nil, state.stopping) }
                // Next deadline: the idle moment or the interval, whichever comes first.
                let next = min(lastWrite + policy.idleDelay, state.lastTruncation + policy.interval)
                return (due, max(.milliseconds(1), next - now), state.stopping)
            }
            if due {
                let started = ContinuousClock.now
                if truncate() {
                    state.withLock { $0.lastTruncation = started }
                    continue
                }
            }
            if stopping { break }
            // Retry a refused truncation no sooner than the idle delay.
            wakeUp.wait(until: wait.map { .now + max($0, due ? policy.idleDelay : .zero) })
        }
        stopped.signal()
    }
}

/// The connection a `WALTruncator` and the `WALCheckpointer` checkpoint with: its own, so a checkpoint never holds
/// the store's writer, and with a short busy timeout, because a TRUNCATE checkpoint holds the database's write lock
/// while it waits for readers — every other writer, in any process, would wait with it.
final class CheckpointConnection: Sendable {
    private let connection: Mutex<SQLiteConnection>
    /// How long a truncation waits for a writer to commit or a reader to move off the WAL before giving up until its
    /// next try; bounds what it can add to another writer's latency.
    static let busyTimeoutMillis: Int32 = 50

    init(path: String, synchronousFull: Bool) throws {
        connection = Mutex(
            try SQLiteConnection(
                path: path,
                options: .init(
                    busyTimeoutMillis: Self.busyTimeoutMillis, synchronousFull: synchronousFull, cacheKiB: 256)))
    }

    /// `PRAGMA wal_checkpoint(PASSIVE)`: copies what it can of the WAL into the database without waiting for
    /// anyone. The WAL's length in pages, all of it copied, or nil when the checkpoint could not run at all.
    func checkpointPassive() -> Int? {
        connection.withLock { Self.passive($0) }
    }

    /// The pragma's row is (busy, log frames, checkpointed frames); busy = 1 means it did not complete.
    private static func passive(_ db: SQLiteConnection) -> Int? {
        try? db.statement("PRAGMA wal_checkpoint(PASSIVE)").rows { $0.int(0) == 0 ? $0.int(2) : nil }.first ?? nil
    }

    /// `PRAGMA wal_checkpoint(TRUNCATE)`: copies the WAL into the database and truncates it to zero bytes. False
    /// when it could not finish (a reader still uses the WAL, or a writer held the lock past the busy timeout).
    func truncateWAL() -> Bool {
        connection.withLock { db in
            // A TRUNCATE checkpoint holds the write lock while it copies and syncs: every writer waits. A PASSIVE one
            // first copies what is there without the lock, so the TRUNCATE has only the last commits left to copy.
            // (The WAL may hold up to `WALCheckpointer`'s 32 MiB not yet copied.)
            _ = Self.passive(db)
            // The pragma's row is (busy, log frames, checkpointed frames); busy = 1 means it did not complete.
            return (try? db.statement("PRAGMA wal_checkpoint(TRUNCATE)").rows { $0.int(0) }.first) == 0
        }
    }
}
