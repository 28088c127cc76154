import Common
import Foundation
import Queue
import Synchronization
import Threading

/// The one thread of an ingest process that writes jobs. Webhook handlers hand it jobs and suspend their
/// connection; it commits whatever has accumulated in one transaction (group commit) and then calls every
/// completion. While a commit runs, new jobs gather for the next one, so batches grow with load by themselves
/// and one SQLite writer keeps up with many clients.
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
    /// Signalled when a job is queued or `stop` is called; the writer thread sleeps on it.
    private let wakeUp = WakeUp()
    private let state = Mutex(State())
    private let finished = DispatchSemaphore(value: 0)
    /// Seconds a depth count may be old.
    static let recountInterval: Duration = .seconds(1)

    public init(
        store: any JobQueue, clock: any WallClock, ttl: Duration, queueMax: Int = .max, deviceCap: Int = .max,
        maxBatch: Int = 1000, logger: Logger, metrics: MetricsRegistry, onCommit: @escaping @Sendable () -> Void = {}
    ) {
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
        refreshDepth()
        let thread = Thread { [self] in run() }
        thread.name = "queue-writer"
        thread.start()
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
        wakeUp.signal()
    }

    /// Jobs waiting in the queue, counted at most a second ago plus those added since.
    public var estimatedDepth: Int { state.withLock { $0.depth } }

    /// Whether the queue is below QUEUE_MAX. While it is not, the writer thread recounts every second even though
    /// nothing is committed (everything is refused), so the relay accepts again within a second or so of the
    /// backlog draining, without a query per request.
    public var acceptsMore: Bool { estimatedDepth < queueMax }

    /// Commits what is pending, then stops the thread. Blocks until it has.
    public func stop() {
        state.withLock { $0.stopping = true }
        wakeUp.signal()
        finished.wait()
    }

    private func run() {
        while true {
            while state.withLock({ $0.pending.isEmpty && !$0.stopping }) {
                if acceptsMore {
                    wakeUp.wait(until: nil)
                } else if !wakeUp.wait(until: .now + Self.recountInterval) {
                    // Full and idle: nothing will commit, so only a recount can let webhooks in again.
                    refreshDepth()
                }
            }
            let (batch, stop) = state.withLock { state -> ([Pending], Bool) in
                let count = min(state.pending.count, maxBatch)
                let batch = Array(state.pending.prefix(count))
                state.pending.removeFirst(count)
                return (batch, state.stopping && state.pending.isEmpty)
            }
            if !batch.isEmpty { commit(batch) }
            if stop { break }
            if clock.nowMillis() - state.withLock({ $0.depthCountedAt }) > Self.recountInterval.wholeMilliseconds { refreshDepth() }
        }
        finished.signal()
    }

    private func commit(_ batch: [Pending]) {
        metrics.observe("kumapush_enqueue_batch_size", value: Double(batch.count))
        do {
            let results = try store.enqueue(batch.map(\.job), now: clock.nowMillis(), ttl: ttl, deviceCap: deviceCap)
            let queued = results.filter { $0 == .queued }.count
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
