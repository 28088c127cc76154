import Common
import Foundation
import SQLiteDriver
import Synchronization
import Threading

/// Copies the write-ahead log back into the database on a thread of its own, so that commits do not.
///
/// Why: SQLite's automatic checkpoint runs in the commit that takes the WAL past 1,000 pages: once the commit is
/// durable, still inside its `sqlite3_step`, it copies every page the WAL holds into the database file and syncs
/// both files, while the store's writer connection (and everything queued behind it in this process) waits. With a
/// million jobs queued a batch of completions dirtied about a thousand index pages (each device's head sat in a
/// leaf of the index by device of its own, until migration 12), so nearly every deliverer commit paid for a whole checkpoint: `QueueBench`
/// claimed at 0.54–0.66 of its rate with 10,000 queued. Here the writer only reports its WAL size after each commit
/// (`SQLiteConnection.reportWALCommits`) and this thread checkpoints PASSIVE on its own connection meanwhile.
///
/// The bound: a passive checkpoint cannot copy what is committed while it runs, and the WAL only starts again from
/// its beginning once all of it is copied, so under steady writes it would keep growing. Past `inlineFrames` the
/// committing writer checkpoints itself, as SQLite would have. To keep that cheap, the thread is woken after every
/// commit once the WAL is within `backgroundFrames` of it, so only the last commits are left to copy in line. (A
/// passive checkpoint stops at the oldest snapshot a reader still uses, so the bound is soft; the truncation every
/// `WAL_TRUNCATE_INTERVAL` is the hard one.)
final class WALCheckpointer: WALCommitObserver, Sendable {
    /// Pages written since the last checkpoint that wake the thread (32 MiB at 4 KiB pages). Eight times SQLite's
    /// automatic-checkpoint size: a checkpoint copies each page once however often it was rewritten, and at depth
    /// consecutive batches rewrite the same index pages. `QueueBench`, claim rate at 1M against 10k, three runs
    /// each: 0.70–0.71 at 1,000 pages, 0.76–0.80 at 4,000, 0.72–0.82 at 8,000.
    static let defaultBackgroundFrames = 8_000
    /// WAL pages (128 MiB) past which a commit checkpoints in line (see the bound above).
    static let defaultInlineFrames = 32_000
    /// Nice levels the thread runs below the thread that opened the store, when it yields (`SQLiteStore.Options`,
    /// set by `ingest`): its copies and syncs then take the core the request threads leave idle instead of taking
    /// turns with them. Under `make bench`'s ingest load on two cores, 30,280 against 28,859 webhooks/s and 43.6
    /// against 44.9 µs of CPU a webhook (medians of six alternated rounds), a third of the checkpoints, each larger,
    /// and a WAL 2–2.6 MiB past the in-line bound at its peak instead of 0.7–0.8 (a commit past the bound copies
    /// nothing while this thread holds the checkpoint). Not for a deliverer: its drains, which keep both cores busy,
    /// used 20.9 against 20.3 µs of CPU a push, by all appearances the delivery thread checkpointing in line
    /// (docs/performance.md, thirty-fifth session).
    static let yieldingPriorityDrop: Int32 = 10

    private let backgroundFrames: Int
    private let inlineFrames: Int
    /// Nice levels the thread lowers itself by when it starts (0 or `yieldingPriorityDrop`).
    private let priorityDrop: Int32
    /// Where a priority the thread could not lower is told.
    private let logger: Logger?

    private let connection: CheckpointConnection
    /// The WAL size (in pages) the last background checkpoint copied up to.
    private let checkpointed = Atomic<Int>(0)
    /// The WAL size after the writer's last commit.
    private let lastFrames = Atomic<Int>(0)
    private let stopping = Atomic<Bool>(false)
    private let wakeUp = WakeUp()
    private let stopped = DispatchSemaphore(value: 0)
    /// The thread's kernel id once it runs, 0 before (tests read its nice value from /proc).
    let threadID = Atomic<Int32>(0)

    init(
        connection: CheckpointConnection, backgroundFrames: Int = defaultBackgroundFrames,
        inlineFrames: Int = defaultInlineFrames, yields: Bool = false, logger: Logger? = nil
    ) {
        self.connection = connection
        self.logger = logger
        self.backgroundFrames = backgroundFrames
        self.inlineFrames = inlineFrames
        priorityDrop = yields ? Self.yieldingPriorityDrop : 0
        Thread.start(named: "wal-checkpoint") { [self] in run() }
    }

    /// A commit left the WAL `frames` pages long. Called by the writer's connection, inside its commit; returns whether
    /// that commit should checkpoint in line.
    func committed(frames: Int) -> Bool {
        if frames >= inlineFrames { return true }
        // Shorter than after the last commit: the WAL has started again from its beginning, and nothing in it is
        // copied yet. (Only the writer's commits call this, one at a time.)
        if frames < lastFrames.exchange(frames, ordering: .relaxed) { checkpointed.store(0, ordering: .relaxed) }
        // More copied than the WAL holds: a count from before a restart (stored late by the thread, or a restart by
        // another process this one never saw shorter). Count nothing as copied rather than sleep through the WAL.
        let copied = checkpointed.load(ordering: .relaxed)
        let uncopied = copied > frames ? frames : frames - copied
        if uncopied >= backgroundFrames || frames >= inlineFrames - backgroundFrames { wakeUp.signal() }
        return false
    }

    /// A checkpoint copied the WAL up to `frames` pages (the thread's own; tests set it to model a stale count).
    func noteCheckpointed(frames: Int) {
        checkpointed.store(frames, ordering: .relaxed)
    }

    /// Stops the thread. Blocks until it has ended.
    func stop() {
        stopping.store(true, ordering: .relaxed)
        wakeUp.signal()
        stopped.wait()
    }

    private func run() {
        if priorityDrop > 0, Thread.lowerCurrentPriority(by: priorityDrop) == nil {
            // A system call filter without setpriority (an older copy of the systemd unit), for instance: checkpoints
            // then take turns with the request threads, as in a deliverer.
            logger?.warning("the WAL checkpoint thread could not lower its priority; checkpoints compete with requests for the cores")
        }
        threadID.store(Thread.currentKernelID, ordering: .releasing)
        while true {
            wakeUp.wait(until: nil)
            if stopping.load(ordering: .relaxed) { break }
            if let frames = connection.checkpointPassive() { noteCheckpointed(frames: frames) }
        }
        stopped.signal()
    }
}
