import Common
import Foundation
import Queue
import Synchronization
import Threading

/// The threads of an ingest process that write jobs. Webhook handlers hand them jobs and suspend their
/// connection; a writer thread commits whatever has accumulated in one transaction (group commit) and then calls
/// every completion. While a commit runs, new jobs gather for the next one, so batches grow with load by
/// themselves and one SQLite writer keeps up with many clients.
///
/// A store that takes several transactions at once (`JobQueue.concurrentEnqueues`: PostgreSQL, whose commit waits
/// for the server's disk while the machine idles) gets that many writer threads. A device's jobs still commit in
/// the order they arrived: a batch leaves out every device a batch being committed holds, so two batches never
/// share a device, and that device's later jobs wait for the next batch, behind the earlier ones.
public final class QueueWriter: Sendable {
    public typealias Completion = @Sendable (Result<EnqueueResult, StoreError>) -> Void

    struct Pending: Sendable {
        let job: NewJob
        let completion: Completion
    }

    struct State: Sendable {
        var pending: [Pending] = []
        var stopping = false
        /// Jobs waiting in the store, as last counted plus what was added since (for QUEUE_MAX).
        var depth = 0
        var depthCountedAt: Int64 = 0
        /// Devices of the batches being committed now (several writer threads only).
        var committing: Set<String> = []
    }

    private let store: any JobQueue
    private let clock: any WallClock
    private let ttl: Duration
    /// Live jobs above which webhooks are refused (QUEUE_MAX).
    private let queueMax: Int
    /// DEVICE_QUEUE_MAX: past it a device's alerts fold into its waiting digest instead of becoming jobs.
    private let deviceCap: Int
    private let maxBatch: Int
    private let logger: Logger
    private let metrics: MetricsRegistry
    private let onCommit: @Sendable () -> Void
    /// One per writer thread, which sleeps on it; all are signalled when a job is queued, a batch is committed (it
    /// may have held back another's jobs) or `stop` is called.
    private let wakeUps: [WakeUp]
    /// One per writer thread, beaten on every turn (an idle one turns every `recountInterval`): `/livez` and the
    /// systemd watchdog read them.
    private let heartbeats: [Heartbeat]
    private let state = Mutex(State())
    /// Entered by each writer thread, left when it ends: `stop` waits on it, however often it is called.
    private let running = DispatchGroup()
    /// Seconds a depth count may be old.
    static let recountInterval: Duration = .seconds(1)

    public init(
        store: any JobQueue, clock: any WallClock, ttl: Duration, queueMax: Int = .max, deviceCap: Int = .max,
        maxBatch: Int = 1000, logger: Logger, metrics: MetricsRegistry, onCommit: @escaping @Sendable () -> Void = {}
    ) {
        wakeUps = (0..<max(1, store.concurrentEnqueues)).map { _ in WakeUp() }
        heartbeats = wakeUps.map { _ in Heartbeat() }
        self.deviceCap = deviceCap
        self.onCommit = onCommit
        self.queueMax = queueMax
        self.store = store
        self.clock = clock
        self.ttl = ttl
        self.maxBatch = maxBatch
        self.logger = logger
        self.metrics = metrics
        metrics.describe(
            "kumapush_enqueue_batch_size", .histogram, "Jobs committed per group commit.",
            buckets: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000])
        metrics.describe(
            "kumapush_enqueue_commit_seconds", .histogram, "Time one group commit takes: the store's enqueue transaction.",
            buckets: latencyBuckets)
        refreshDepth()
        for (wakeUp, heartbeat) in zip(wakeUps, heartbeats) {
            running.enter()
            Thread.start(named: "queue-writer") { [self] in run(wakeUp, heartbeat: heartbeat) }
        }
    }

    /// Queues `job` for the next commit; `completion` runs on the writer thread once it is committed (or failed).
    public func submit(_ job: NewJob, completion: @escaping Completion) {
        let accepted = state.withLock { state -> Bool in
            guard !state.stopping else { return false }
            state.pending.append(Pending(job: job, completion: completion))
            return true
        }
        guard accepted else {
            completion(.failure(StoreError(.unavailable, "shutting down")))
            return
        }
        wakeAll()
    }

    private func wakeAll() {
        for wakeUp in wakeUps { wakeUp.signal() }
    }

    /// Jobs waiting in the queue, counted at most a second ago plus those added since.
    public var estimatedDepth: Int { state.withLock { $0.depth } }

    /// Whether the queue is below QUEUE_MAX. While it is not, the writer thread recounts every second even though
    /// nothing is committed (everything is refused), so the relay accepts again within a second or so of the
    /// backlog draining, without a query per request.
    public var acceptsMore: Bool { estimatedDepth < queueMax }

    /// Commits what is pending, then stops the threads. Blocks until they have; a second call (a second shutdown)
    /// returns once they have too.
    public func stop() {
        state.withLock { $0.stopping = true }
        wakeAll()
        running.wait()
    }

    /// The longest any writer thread has gone without a turn (a commit waiting on a locked database counts).
    public var longestSilence: Duration { heartbeats.map { $0.age }.max() ?? .zero }

    private func run(_ wakeUp: WakeUp, heartbeat: Heartbeat) {
        while true {
            heartbeat.beat()
            while state.withLock({ !Self.hasWork($0) && !($0.stopping && $0.pending.isEmpty) }) {
                heartbeat.beat()
                if acceptsMore {
                    // A deadline, not an endless sleep: an idle writer still beats, so silence means wedged.
                    wakeUp.wait(until: .now + Self.recountInterval)
                } else if !wakeUp.wait(until: .now + Self.recountInterval) {
                    // Full and idle: nothing will commit, so only a recount can let webhooks in again.
                    refreshDepth()
                }
            }
            let (batch, stop) = state.withLock { state -> ([Pending], Bool) in
                let batch = takeBatch(&state)
                return (batch, state.stopping && state.pending.isEmpty)
            }
            if !batch.isEmpty {
                commit(batch)
                if wakeUps.count > 1 {
                    state.withLock { state in
                        for pending in batch { state.committing.remove(pending.job.deviceID) }
                    }
                    wakeAll()
                }
            }
            if stop { break }
            if clock.nowMillis() - state.withLock({ $0.depthCountedAt }) > Self.recountInterval.wholeMilliseconds { refreshDepth() }
        }
        running.leave()
    }

    /// Whether a pending job's device is free of the batches being committed (always, with one writer thread).
    private static func hasWork(_ state: State) -> Bool {
        state.committing.isEmpty ? !state.pending.isEmpty : state.pending.contains { !state.committing.contains($0.job.deviceID) }
    }

    /// The oldest pending jobs, up to `maxBatch`, leaving out (in order) those of devices another writer thread is
    /// committing; with several threads, the batch's devices are marked as committing.
    private func takeBatch(_ state: inout State) -> [Pending] {
        guard wakeUps.count > 1 else {
            let count = min(state.pending.count, maxBatch)
            defer { state.pending.removeFirst(count) }
            return Array(state.pending.prefix(count))
        }
        var batch: [Pending] = []
        var heldBack: [Pending] = []
        for pending in state.pending {
            if batch.count < maxBatch, !state.committing.contains(pending.job.deviceID) {
                batch.append(pending)
            } else {
                heldBack.append(pending)
            }
        }
        for pending in batch { state.committing.insert(pending.job.deviceID) }
        state.pending = heldBack
        return batch
    }

    private func commit(_ batch: [Pending]) {
        metrics.observe("kumapush_enqueue_batch_size", value: Double(batch.count))
        do {
            let started = ContinuousClock.now
            let results = try store.enqueue(batch.map(\.job), now: clock.nowMillis(), ttl: ttl, deviceCap: deviceCap)
            metrics.observe("kumapush_enqueue_commit_seconds", value: (ContinuousClock.now - started).seconds)
            let queued = results.filter(\.storedAJob).count
            state.withLock { $0.depth += queued }
            if queued > 0 { onCommit() }
            for (pending, result) in zip(batch, results) { pending.completion(.success(result)) }
        } catch {
            logger.error("enqueue failed", ["error": error.description, "batch.size": String(batch.count)])
            for pending in batch { pending.completion(.failure(error)) }
        }
    }

    private func refreshDepth() {
        let now = clock.nowMillis()
        guard let count = try? store.liveJobCount() else { return }
        state.withLock {
            $0.depth = count
            $0.depthCountedAt = now
        }
    }
}
