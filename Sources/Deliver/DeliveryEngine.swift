import Common
import Foundation
import HTTP2
import Queue
import Synchronization
import Threading

/// The worker pool of one deliver process (SPEC §4): claims due head-of-device jobs sized to the free HTTP/2
/// stream capacity, sends them over the connection pool, applies each verdict, and records results in batched
/// transactions. One thread runs the loop; answers arrive on the connections' event loops and are handed over.
public final class DeliveryEngine: Sendable {
    public struct Configuration: Sendable {
        public var worker: String
        public var concurrency: Int
        public var lease: Duration
        public var backoff: Backoff
        public var deadLetterRetention: Duration
        public var tombstoneRetention: Duration
        /// How often the engine checks the database for jobs written by other processes while busy (the fallback on
        /// PostgreSQL, whose store wakes the engine at each NOTIFY: `RelayStore.wakeOnChanges`)…
        public var pollInterval: Duration = .milliseconds(5)
        /// …and after a second without work, so an idle deliverer costs almost nothing (measured: 1.6 % of a core
        /// at 5 ms; `serve` is woken directly by its ingest and does not depend on this).
        public var idlePollInterval: Duration = .milliseconds(25)
        /// DEVICE_BURST: pushes per device per minute before waiting alerts merge into a digest (nil: never).
        public var deviceBurst: Int?
        /// Most alerts one digest merges.
        public var maximumMerged = 1000
        /// DEVICE_QUEUE_MAX, as ingest applies it: near it a digest leaves the job ingest folds into (`DigestCarry`).
        public var deviceQueueMax: Int
        /// Over its burst, a device gets at most one push per window; what arrives meanwhile waits and goes out as
        /// one digest.
        public var digestWindow: Duration = .seconds(5)
        /// STALL_TIMEOUT: due jobs, APNs not known to be failing, and nothing sent for this long → reset (SPEC §4).
        public var stallTimeout: Duration
        /// DEAD_LETTER_MAX: the oldest dead letters past it are purged (checked every 10 s).
        public var deadLetterMax: Int
        /// The environment the relay is configured for (ENV / APNS_ENVIRONMENT); `pool` talks to it.
        public var environment: Settings.APNsEnvironment
        /// What a push's lease must still hold for it to be sent (`Settings.leaseNeededToSend`: APNS_REQUEST_TIMEOUT
        /// and a scheduling allowance; LEASE_TIMEOUT leaves room for it, checked at start-up).
        public var leaseNeededToSend: Duration
        /// How long a probe may go without word from APNs before it counts as lost: a little over
        /// APNS_REQUEST_TIMEOUT, which answers or resets every request that was written.
        public var probeTimeout: Duration

        public init(settings: Settings, worker: String) {
            self.worker = worker
            concurrency = settings.deliverConcurrency
            lease = settings.leaseTimeout
            backoff = Backoff(base: settings.retryBase, cap: settings.retryMax)
            deadLetterRetention = settings.deadLetterRetention
            tombstoneRetention = settings.tombstoneRetention
            deviceBurst = settings.deviceBurst
            deviceQueueMax = settings.deviceQueueMax
            stallTimeout = settings.stallTimeout
            deadLetterMax = settings.deadLetterMax
            environment = settings.apnsEnvironment
            leaseNeededToSend = settings.leaseNeededToSend
            probeTimeout = settings.apnsRequestTimeout + .seconds(5)
        }
    }

    struct InFlight: Sendable {
        let job: ClaimedJob
        let generation: Int
        var resends: Int
        /// Where this attempt went, and whether the push already switched environment once (SPEC §4).
        let environment: Settings.APNsEnvironment
        let switched: Bool
        let started: ContinuousClock.Instant
        /// Pending jobs this push is a digest of.
        let merged: [MergedJob]
        /// APNs already called this attempt's provider token expired once, and it went again on a new connection.
        var tokenRefused = false
    }

    struct Answer: Sendable {
        let jobID: Int64
        /// Which job of that id: SQLite gives a deleted newest job's id to the next one (a device deleted with its
        /// push in flight), so the id alone could match the late answer to another device's push.
        let publicID: String
        let result: Result<HTTP2Response, HTTP2Failure>
        let connection: HTTP2ClientConnection
    }

    let configuration: Configuration
    /// `configuration.leaseNeededToSend` in milliseconds, worked out once: asked twice a push, and a `Duration`'s
    /// components cost a division each time.
    private let leaseNeededToSendMillis: Int64
    let store: any RelayStore
    let pool: APNsConnectionPool
    /// The other APNs environment, when there is one to try (`Settings.otherAPNsBaseURL`).
    let other: OtherAPNsEnvironment?
    let tokens: ProviderTokenSource
    let factory: APNsRequestFactory
    let clock: any WallClock
    let logger: Logger
    let metrics: MetricsRegistry
    let perPush: DeliveryMetrics.PerPush
    private let inbox = DeliveryInbox()
    private let finished = DispatchSemaphore(value: 0)
    /// Loop-thread state, confined to the delivery thread (claimed when it starts, checked on every access).
    let loopState: ThreadConfined<DeliveryLoopState>
    /// Set by `shutdown`: how long the loop still waits for pushes in flight.
    private let graceDeadline = Mutex<ContinuousClock.Instant?>(nil)
    /// Set when the stall detector fired, cleared by the next answer from APNs; `serve`'s `/health` reads it.
    let stalled = Atomic<Bool>(false)
    /// Beaten on every turn of the delivery loop (at least every `idlePollInterval`): `/livez` and systemd's watchdog.
    public let heartbeat = Heartbeat()
    /// The configuration fault delivery is paused for, as of the loop's last turn (`/readyz`; the breaker itself is
    /// the loop's alone).
    let publishedPause = Mutex<String?>(nil)
    /// Whether the outage breaker was open (APNs failing for everyone) as of the loop's last turn (metrics).
    let publishedOutage = Atomic<Bool>(false)
    /// Pushes claimed and built that wait for a stream of their pool, as of the loop's last turn.
    let resendsWaiting = Atomic<Int>(0)

    public init(
        configuration: Configuration, store: any RelayStore, pool: APNsConnectionPool, other: OtherAPNsEnvironment? = nil,
        tokens: ProviderTokenSource, factory: APNsRequestFactory, clock: any WallClock, logger: Logger, metrics: MetricsRegistry
    ) {
        self.configuration = configuration
        leaseNeededToSendMillis = configuration.leaseNeededToSend.wholeMilliseconds
        self.store = store
        self.pool = pool
        self.other = other
        self.tokens = tokens
        self.factory = factory
        self.clock = clock
        self.logger = logger
        self.metrics = metrics
        loopState = ThreadConfined(
            DeliveryLoopState(breaker: OutageBreaker(probeTimeout: configuration.probeTimeout)), name: "delivery loop state")
        DeliveryMetrics.describe(metrics, pool: pool, tokens: tokens)
        perPush = DeliveryMetrics.PerPush(metrics)
        DeliveryMetrics.describeState(metrics, engine: self)
    }

    public func start() {
        // The store wakes the loop when another process commits work (PostgreSQL: at the NOTIFY) rather than let it
        // wait for its next poll. Asked here, not where an engine is built, so that none goes without it (deliver,
        // serve, the tests'); the loop stops it when it ends.
        store.wakeOnChanges { [weak self] in self?.wake() }
        Thread.start(named: "delivery") { [self] in run() }
    }

    /// False from a detected stall until APNs answers again (SPEC §4 "Delivery never stalls").
    public var isHealthy: Bool { !stalled.load(ordering: .relaxed) }

    /// Pushes claimed that wait for a free stream of their environment's connections (as of the loop's last turn).
    public var waitingForStreams: Int { resendsWaiting.load(ordering: .relaxed) }

    /// New jobs may be waiting (called by ingest in `serve`, and by the connection pool when capacity returns).
    public func wake() {
        inbox.requestWake()
    }

    /// Stops claiming, waits up to `grace` for pushes in flight, gives back the leases of the rest. Blocks.
    public func shutdown(grace: Duration) {
        graceDeadline.withLock { $0 = .now + grace }
        inbox.requestStop()
        finished.wait()
    }

    // MARK: The loop

    private func run() {
        let state = loopState
        state.claim()
        var lastHousekeeping = ContinuousClock.now - .seconds(3600)
        var lastPurge = ContinuousClock.now - .seconds(3600)
        var lastChange = (try? store.changeCounter()) ?? 0
        while true {
            heartbeat.beat()
            let arrived = inbox.take()
            var outcomes: [JobOutcome] = []
            outcomes.reserveCapacity(arrived.answers.count)
            if !arrived.answers.isEmpty {
                let time = AnswerTime(now: clock.nowMillis(), instant: .now)
                for answer in arrived.answers { handle(answer, at: time, into: &outcomes) }
            }
            dispatchResends()
            let toRecord = !outcomes.isEmpty || !state.unrecorded.isEmpty && ContinuousClock.now >= state.unrecordedRetryAt ? outcomes : nil

            if arrived.stopping {
                if let toRecord { record(toRecord) }
                if state.inFlight.isEmpty || ContinuousClock.now >= graceDeadline.withLock({ $0 ?? .now }) { break }
            } else {
                let now = clock.nowMillis()
                if ContinuousClock.now - lastHousekeeping >= .seconds(1) {
                    lastHousekeeping = .now
                    housekeeping(now: now, purge: ContinuousClock.now - lastPurge >= .seconds(600))
                    if ContinuousClock.now - lastPurge >= .seconds(600) { lastPurge = .now }
                    checkLiveness(now: now)
                    refreshPause(now: now)
                    publishReadiness()
                    other?.closeIfIdle()
                    state.claimDue = true
                }
                let change = noteDatabaseFailure { try store.changeCounter() } ?? lastChange
                if change != lastChange || arrived.wakeRequested || !arrived.answers.isEmpty { state.lastActivity = .now }
                if change != lastChange || arrived.wakeRequested {
                    lastChange = change
                    state.claimDue = true
                }
                // Only a retry that is due is forgotten: a commit (our own outcomes move the change counter) must not
                // wipe the time of a retry still ahead, or it waits for the next once-a-second claim instead.
                if let retry = state.nextRetryAt, retry <= now {
                    state.claimDue = true
                    state.nextRetryAt = nil
                }
                if pool.allDown {
                    state.lastFailureAt = .now
                    if case .opened = state.breaker.connectionsDown(now: now) {
                        logger.error("APNs unreachable: every connection failing, delivery paused until a probe succeeds")
                    }
                }
                claimAndSend(now: now, recordingFirst: toRecord)
                settleProbe()
            }
            flushSends()  // none left by the calls above; kept so that no path can leave a request unsent
            waitForWork()
        }
        releaseRemaining()
        store.stopWakingOnChanges()
        finished.signal()
    }

    /// Sleeps until an answer, a wake-up or the shutdown arrives (at once if one came during this round), or the
    /// poll interval passes.
    private func waitForWork() {
        let idle = ContinuousClock.now - loopState.lastActivity > .seconds(1) && loopState.inFlight.isEmpty
        inbox.wait(until: .now + (idle ? configuration.idlePollInterval : configuration.pollInterval))
    }

    /// Claims as many due heads as there are free streams, and sends them. `outcomes`, this turn's answers, are
    /// recorded first, in the claim's transaction when the claim goes ahead (the heads they promote are written once).
    private func claimAndSend(now: Int64, recordingFirst outcomes: [JobOutcome]?) {
        let state = loopState
        let allowance = state.breaker.allowance(now: now)
        guard allowance == .normal, let outcomes, let limit = claimLimit(allowance, due: true) else {
            if let outcomes { record(outcomes) }
            if let limit = claimLimit(allowance, due: state.claimDue), let jobs = claim(limit: limit, allowance: allowance, now: now) {
                send(claimed: jobs, limit: limit, allowance: allowance, now: now)
            }
            return
        }
        if let jobs = recordThenClaim(outcomes, limit: limit, now: now) {
            send(claimed: jobs, limit: limit, allowance: allowance, now: now)
        }
    }

    /// How many jobs this turn may claim: nil when none (no free stream, the breaker allowing nothing, or nothing
    /// due: `due` is whether anything may have become claimable since the last claim).
    private func claimLimit(_ allowance: OutageBreaker.Allowance, due: Bool) -> Int? {
        let state = loopState
        // Pushes waiting for this pool's streams go before new claims; those waiting for the other environment's
        // (unreachable, or granting none) take nothing from it.
        let waitingHere = state.resendQueue.count { route($0) == configuration.environment }
        let capacity = min(configuration.concurrency - state.inFlight.count, pool.freeStreams) - waitingHere
        guard capacity > 0 else { return nil }
        switch allowance {
        case .normal:
            return due ? min(capacity, 1000) : nil
        case .probe:
            // With the breaker open or paused and nothing queued, a claim every turn was two empty write
            // transactions every 25 ms: on SQLite the writer ingest waits for, on PostgreSQL from every deliverer.
            return due || !state.probeFoundNothing ? 1 : nil
        case .nothing:
            return nil
        }
    }

    /// The claim alone. Nil when it failed (logged).
    func claim(limit: Int, allowance: OutageBreaker.Allowance, now: Int64) -> [ClaimedJob]? {
        let state = loopState
        state.claimDue = false
        do {
            let started = ContinuousClock.now
            var jobs = try store.claim(worker: configuration.worker, limit: limit, now: now, lease: configuration.lease)
            metrics.observe("kumapush_delivery_store_seconds", [("operation", "claim")], value: (ContinuousClock.now - started).seconds)
            // A probe with nothing due takes the retry that comes soonest: the backlog's retries may be backed off
            // for minutes, and APNs' recovery should not wait for them (the backlog goes out once a probe is answered).
            if allowance == .probe, jobs.isEmpty, try store.makeNextRetryDue(now: now) {
                jobs = try store.claim(worker: configuration.worker, limit: limit, now: now, lease: configuration.lease)
            }
            return jobs
        } catch {
            logger.error("claim failed", ["error": error.description])
            state.lastDatabaseFailureAt = .now
            return nil
        }
    }

    /// Sends what a claim of up to `limit` returned; a job expired or inside its device's digest window is recorded
    /// instead.
    private func send(claimed jobs: [ClaimedJob], limit: Int, allowance: OutageBreaker.Allowance, now: Int64) {
        let state = loopState
        for job in jobs where job.attempt == 1 {
            perPush.claimWait.observe(Double(max(0, now - job.createdAt)) / 1000)
        }
        if jobs.count == limit { state.claimDue = true }
        if allowance == .probe { state.probeFoundNothing = jobs.isEmpty }
        for job in jobs { forgetEarlierHolder(ofID: job) }
        if allowance == .probe, let probe = jobs.first {
            state.breaker.probeSent(jobID: probe.id, now: now)
            logger.info("probing APNs with one push")
        }
        var outcomes: [JobOutcome] = []
        for job in jobs {
            if now > job.expiresAt {
                outcomes.append(abandonedUnsent(job, reason: "Expired"))
                continue
            }
            if let until = digestWindowEnd(for: job, now: now) {
                outcomes.append(JobOutcome(job, kind: .postpone(until: until)))
                state.nextRetryAt = min(state.nextRetryAt ?? until, until)
                continue
            }
            send(Resend(job: job, resends: 0, environment: nil, switched: false), outcomes: &outcomes)
        }
        flushSends()
        if !outcomes.isEmpty { record(outcomes) }
    }

    /// Wakes the event loop of each connection this round handed requests to, once, so that it takes them all in one
    /// turn (`HTTP2ClientConnection.sendDeferringWake`). Waking it for the first request of a burst had it take a
    /// few requests at a time, interrupting the delivery thread several times a turn.
    private func flushSends() {
        let state = loopState
        guard !state.connectionsToFlush.isEmpty else { return }
        for connection in state.connectionsToFlush { connection.flush() }
        state.connectionsToFlush.removeAll(keepingCapacity: true)
        state.sentSinceFlush = 0
    }

    /// SQLite gives a deleted newest job's id to the next job. A push this loop still holds under `job`'s id with
    /// another public id — in flight, or waiting for a stream — belongs to a row that is gone (its device was deleted);
    /// `job` was claimed after it, so it is the live one. The old push is forgotten: not sent, and nothing it would
    /// record (an answer, a give-back) can land on `job`'s row, which has the same id, worker and attempt.
    private func forgetEarlierHolder(ofID job: ClaimedJob) {
        let state = loopState
        if let other = state.inFlight[job.id], other.job.publicID != job.publicID { state.inFlight[job.id] = nil }
        // Usually empty: `removeAll(where:)` on it still cost more than the lookup above.
        if !state.resendQueue.isEmpty { state.resendQueue.removeAll { $0.job.id == job.id && $0.job.publicID != job.publicID } }
    }

    /// A push to (re)send: how often it was resent, and the environment it must go to (nil: the device's).
    struct Resend: Sendable {
        let job: ClaimedJob
        let resends: Int
        let environment: Settings.APNsEnvironment?
        let switched: Bool
        /// Resent after APNs called the provider token expired (see `InFlight.tokenRefused`).
        var tokenRefused = false
    }

    private func send(_ attempt: Resend, outcomes: inout [JobOutcome]) {
        let state = loopState
        let (job, resends) = (attempt.job, attempt.resends)
        let now = clock.nowMillis()
        // A request still open when the lease ends could reach APNs after another worker took the job over and
        // delivered the device's next one: out of order. A push resent late in its lease (refused, a new provider
        // token, the other environment), or sent after the loop fell behind, is given back instead, unsent and its
        // attempt not counted, and claimed again with a fresh lease.
        guard leaseAllowsSending(job, now: now) else {
            outcomes.append(JobOutcome(job, kind: .postpone(until: now)))
            return
        }
        let request: HTTP2Request
        let generation: Int
        let merged = resends == 0 ? stormBacklog(of: job, now: now) : []
        let push: PushMessage
        do {
            push =
                merged.isEmpty && job.folded.isEmpty
                ? try factory.push(for: job, now: now) : try factory.digest(for: job, merging: merged, now: now)
        } catch {
            outcomes.append(abandonedUnsent(job, reason: "InvalidPayload"))
            return
        }
        do {
            let (token, tokenGeneration) = try tokens.token()
            generation = tokenGeneration
            request = factory.request(for: job, push: push, providerToken: token, merged: merged)
        } catch {
            // Our signing failed, not the push: it waits and is tried again, never dead-lettered for it.
            logger.error("cannot sign a provider token", ["error": String(describing: error)])
            outcomes.append(
                Self.outcome(
                    for: .retry(reason: "ProviderTokenUnavailable", outage: false), job: job,
                    backoff: configuration.backoff, now: now))
            return
        }
        // Again, now that the push is built, when the backlog was looked up: that query can wait on the database,
        // which the first check did not count. Without it, building took microseconds (a provider token's signature,
        // made once in 20 minutes or more, well under a millisecond) against a lease allowance of seconds: the clock
        // is not read again (two reads a push of the eight it took were a tenth of a microsecond).
        let built = resends == 0 && stormBacklogReadsTheStore(for: job) ? clock.nowMillis() : now
        guard leaseAllowsSending(job, now: built) else {
            outcomes.append(JobOutcome(job, kind: .postpone(until: built)))
            return
        }
        if !merged.isEmpty || !job.folded.isEmpty {
            metrics.increment("kumapush_digests_total")
            let carried = 1 + job.folded.count + merged.reduce(0) { $0 + 1 + $1.folded.count }
            metrics.increment("kumapush_alerts_merged_total", by: Double(carried))
        }
        let environment = route(attempt)
        guard let connection = pool(for: environment).pick() else {
            state.resendQueue.append(attempt)
            return
        }
        let sentAt = ContinuousClock.now
        state.inFlight[job.id] = InFlight(
            job: job, generation: generation, resends: resends, environment: environment,
            switched: attempt.switched, started: sentAt, merged: merged.map(\.asMerged), tokenRefused: attempt.tokenRefused)
        state.lastSentAt = sentAt
        // A job's first request only, as the claim wait: a retry's time since the webhook is its backoff, and one job
        // retrying against APNs for an hour would fill the top buckets and raise the late-alerts alert on a quiet relay.
        if job.attempt == 1 && resends == 0 {
            perPush.webhookToAPNs.observe(Double(max(0, built - job.createdAt)) / 1000)
        }
        // The completion holds only what matches the answer to its push: capturing `job` copied the whole job into
        // its context (five references retained here, released on the connection's thread when it ends).
        let (jobID, publicID) = (job.id, job.publicID)
        connection.sendDeferringWake(request) { [inbox] result in
            inbox.post(Answer(jobID: jobID, publicID: publicID, result: result, connection: connection))
        }
        if !state.connectionsToFlush.contains(where: { $0 === connection }) { state.connectionsToFlush.append(connection) }
        state.sentSinceFlush += 1
        // A claim of 1,000 would otherwise hold its first request until the last is built (about 4 ms).
        if state.sentSinceFlush >= 256 { flushSends() }
    }

    /// Whether a request for `job` sent at `now` is sure to be answered or reset before its lease ends (with the
    /// allowance of `Settings.leaseNeededToSend`).
    private func leaseAllowsSending(_ job: ClaimedJob, now: Int64) -> Bool {
        job.leaseExpiresAt - now > leaseNeededToSendMillis
    }

    /// Sends the pushes waiting for a stream whose pool has one now. One whose lease can no longer cover a request
    /// is given back unsent, its attempt not counted, and claimed again later with a fresh lease: kept, it would
    /// wait past its lease (its pool unreachable for an hour, say) while each new claim of the same job queued
    /// another copy, without bound.
    private func dispatchResends() {
        let state = loopState
        defer { resendsWaiting.store(state.resendQueue.count, ordering: .relaxed) }
        guard !state.resendQueue.isEmpty else { return }
        let queued = state.resendQueue
        state.resendQueue.removeAll()
        let now = clock.nowMillis()
        var outcomes: [JobOutcome] = []
        for attempt in queued {
            if !leaseAllowsSending(attempt.job, now: now) {
                outcomes.append(JobOutcome(attempt.job, kind: .postpone(until: now)))
            } else if pool(for: route(attempt)).freeStreams > 0 {
                send(attempt, outcomes: &outcomes)
            } else {
                state.resendQueue.append(attempt)
            }
        }
        flushSends()
        if !outcomes.isEmpty { record(outcomes) }
    }

    private func housekeeping(now: Int64, purge: Bool) {
        if let rescued = noteDatabaseFailure(of: { try store.rescueExpiredLeases(now: now) }), rescued > 0 {
            logger.warning("rescued jobs from expired leases", ["count": String(rescued)])
        }
        if now - loopState.deadLettersCheckedAt >= 10_000 {
            loopState.deadLettersCheckedAt = now
            if let purged = noteDatabaseFailure(of: { try store.purgeDeadLetters(keeping: configuration.deadLetterMax) }), purged > 0 {
                metrics.increment("kumapush_dead_letters_purged_total", [("cause", "budget")], by: Double(purged))
                logger.warning("dead letters over DEAD_LETTER_MAX: oldest purged", ["count": String(purged)])
            }
        }
        guard purge else { return }
        _ = try? store.purgeDeadLetters(before: now - configuration.deadLetterRetention.wholeMilliseconds)
        _ = try? store.purgeTombstones(before: now - configuration.tombstoneRetention.wholeMilliseconds)
        _ = try? store.purgeReportedOutcomes(before: now - 600_000)
    }

    private func releaseRemaining() {
        let state = loopState
        if !state.unrecorded.isEmpty { record([]) }
        if state.breaker.isPaused { try? store.recordPause(worker: configuration.worker, reason: nil, now: clock.nowMillis()) }
        let remaining = Array(state.inFlight.keys) + state.resendQueue.map(\.job.id)
        guard !remaining.isEmpty else { return }
        // A request still open at APNs must end before its job goes back: another worker could otherwise send the
        // job again, and the device's next one, while APNs still holds the first. Closing the connections ends them.
        if !state.inFlight.isEmpty {
            pool.shutdown()
            other?.shutdown()
        }
        let released = (try? store.release(jobIDs: remaining, worker: configuration.worker, now: clock.nowMillis())) ?? 0
        logger.warning("released leases of pushes still in flight at shutdown", ["count": String(released)])
    }
}
