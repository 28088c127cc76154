import Common

/// Everything the relay stores, behind one narrow interface: `SQLiteStore` (one host, the default) and
/// `PostgresStore` (several hosts on one PostgreSQL) implement it with the same semantics, checked by one
/// conformance suite run against both.
///
/// Every method takes `now` (milliseconds since 1970) from the caller instead of reading a clock, so tests move
/// time without sleeping and every process agrees on what "due" means. Methods block on storage; call them off
/// latency-critical threads. Errors are `StoreError`.
public protocol DeviceStore: Sendable {
    /// Registers `token` (already lower-cased and validated): creates a device with an id from `newID`, or, if the
    /// token is known, keeps its id and replaces its auth token hash (the old auth token stops working).
    func registerDevice(
        token: String, authTokenHash: String, now: Int64,
        newID: () throws -> String
    ) throws(StoreError) -> Registration
    func device(id: String) throws(StoreError) -> Device?
    /// Changes the token and/or level. nil when there is no such device; `StoreError.tokenConflict` when another
    /// device has the token.
    func updateDevice(id: String, token: String?, level: Device.DownNotificationLevel?) throws(StoreError) -> Device?
    /// Remembers that `token`'s pushes go to `environment` (the other APNs environment accepted it), while the device
    /// still has that token. Registering the token again or changing it forgets this.
    func setEnvironment(deviceID: String, token: String, environment: Settings.APNsEnvironment) throws(StoreError)
    /// Deletes the device and drops its jobs; a Test request waiting for one of them is told it was not delivered
    /// (`DeviceDeleted`). False when there was no such device.
    func deleteDevice(id: String, now: Int64) throws(StoreError) -> Bool
    func tombstone(deviceID: String) throws(StoreError) -> Tombstone?
    /// Adds a device exactly as given (moving from another relay): false when its id or token is already here.
    func importDevice(_ device: Device) throws(StoreError) -> Bool
    /// Whether a device with this id or this token is here: `importDevice` would skip it (`import-devices --dry-run`).
    func hasDevice(id: String, orToken token: String) throws(StoreError) -> Bool
    /// Forgets tombstones older than `before`. Returns how many.
    func purgeTombstones(before: Int64) throws(StoreError) -> Int
}

public protocol JobQueue: Sendable {
    /// Stores `jobs` in one transaction, in order: all of them or (on error) none.
    /// A job whose device no longer exists is skipped and reported as `.deviceGone`. What becomes of a job whose
    /// device holds `deviceCap` live jobs, or of a Test request, is `EnqueuePlan`'s rule, applied alike by both stores.
    func enqueue(_ jobs: some Sequence<NewJob>, now: Int64, ttl: Duration, deviceCap: Int) throws(StoreError) -> [EnqueueResult]
    /// How many `enqueue` transactions the store runs at once to advantage (`QueueWriter` keeps that many going).
    var concurrentEnqueues: Int { get }
    /// Leases up to `limit` due head jobs (at most one per device) to `worker` until `now + lease`.
    func claim(worker: String, limit: Int, now: Int64, lease: Duration) throws(StoreError) -> [ClaimedJob]
    /// Applies outcomes in one transaction. Returns, per outcome, whether the job was still leased to `worker` at
    /// that attempt (false: the lease expired and the answer was ignored).
    func finish(_ outcomes: [JobOutcome], worker: String, now: Int64) throws(StoreError) -> [Bool]
    /// `finish`, then `claim`, in one transaction where the store can: a delivery loop's turn records its answers
    /// and claims the heads they let through, and the pages both write (the jobs promoted, then leased) are written
    /// once. The outcomes are applied or the call throws, and then nothing was claimed; a failed claim is returned
    /// with the outcomes applied.
    func finishThenClaim(_ outcomes: [JobOutcome], worker: String, now: Int64, claimLimit: Int, lease: Duration) throws(StoreError)
        -> FinishedThenClaimed
    /// The oldest `limit` jobs waiting behind the device's head, in order: a look, which seals nothing (the engine's
    /// check whether a digest is due, tools and tests). A digest takes its jobs with `carryBacklog`.
    func pendingJobs(deviceID: String, limit: Int) throws(StoreError) -> [PendingJob]
    /// The jobs a digest of the device's claimed head carries (alert storms), oldest first: `DigestCarry`'s rule over
    /// the oldest `limit` jobs waiting behind the head, none unless at least `minimum` wait, and near `deviceCap`
    /// (DEVICE_QUEUE_MAX, as ingest applies it) never the job ingest folds into. In the same transaction it seals
    /// them, so that enqueue folds no alert into them while the digest is in flight or waits for a retry.
    func carryBacklog(deviceID: String, limit: Int, minimum: Int, deviceCap: Int) throws(StoreError) -> [PendingJob]
    /// Gives leased jobs back unsent (graceful shutdown): due at `now`, attempt not counted.
    func release(jobIDs: [Int64], worker: String, now: Int64) throws(StoreError) -> Int
    /// Makes jobs whose lease expired (crashed worker) due again. Returns how many.
    func rescueExpiredLeases(now: Int64) throws(StoreError) -> Int
    /// The workers holding leases now.
    func leaseHolders() throws(StoreError) -> [String]
    /// Makes the jobs leased to `worker` due now, before their leases expire: the caller knows that worker is gone (a
    /// crashed predecessor on the same machine). Returns how many.
    func takeBackLeases(of worker: String, now: Int64) throws(StoreError) -> Int
    /// Makes every retryable job due now (APNs came back after an outage). Returns how many.
    func makeRetryableDue(now: Int64) throws(StoreError) -> Int
    /// Makes the retryable job whose retry comes soonest due now: an outage probe needs a job, and on a quiet relay
    /// every one may be backed off for minutes (up to `RETRY_MAX`) while APNs is already back. Returns whether there
    /// was one.
    func makeNextRetryDue(now: Int64) throws(StoreError) -> Bool
    /// How many dead letters match.
    func countDeadLetters(_ filter: DeadLetterFilter) throws(StoreError) -> Int
    /// The largest id among the dead letters `filter` matches, nil when none does: where a replay stops.
    func lastDeadLetterID(_ filter: DeadLetterFilter) throws(StoreError) -> Int64?
    /// Examines up to `limit` matching dead letters (oldest first) and puts each back in the queue with a fresh `ttl`,
    /// but for those whose device already holds `deviceCap` live jobs, which stay dead letters (SPEC §4: no device
    /// ever holds more). A replayed job no longer reports an outcome: no Test request waits for it.
    func replayDeadLetters(_ filter: DeadLetterFilter, limit: Int, now: Int64, ttl: Duration, deviceCap: Int) throws(StoreError) -> ReplayBatch
    /// Deletes dead letters finalized before `before`. Returns how many.
    func purgeDeadLetters(before: Int64) throws(StoreError) -> Int
    /// Deletes the oldest dead letters so that at most `keeping` remain. Returns how many.
    func purgeDeadLetters(keeping: Int) throws(StoreError) -> Int
    /// The outcome recorded for a job that reports one, once it is final (nil while it is still queued or retrying).
    func reportedOutcome(publicID: String) throws(StoreError) -> ReportedOutcome?
    /// The outcomes recorded so far for any of `publicIDs`, in one query (every waiting Test request at once).
    func reportedOutcomes(publicIDs: [String]) throws(StoreError) -> [String: ReportedOutcome]
    /// Forgets reported outcomes older than `before`. Returns how many.
    func purgeReportedOutcomes(before: Int64) throws(StoreError) -> Int
    /// A deliverer paused by a configuration fault records `reason`, refreshing it while the pause lasts; nil
    /// clears it (recovered, shutting down).
    func recordPause(worker: String, reason: String?, now: Int64) throws(StoreError)
    /// The reason of a pause some deliverer recorded at or after `since`, if any (a waiting Test request's 502).
    func currentPause(since: Int64) throws(StoreError) -> String?
    /// A number that changes whenever another connection, in any process, commits work to the database: polling it
    /// is how a deliverer notices new jobs written by another process (SQLite: PRAGMA data_version, no disk I/O;
    /// PostgreSQL: the NOTIFYs such commits send, counted on a LISTEN connection).
    func changeCounter() throws(StoreError) -> Int64
    /// Calls `wake`, from a thread of the store's, as soon as another connection commits work that moves
    /// `changeCounter()`, until `stopWakingOnChanges()`: a deliverer then hears of a job at its commit instead of at
    /// its next poll of the counter, which stays the fallback. PostgreSQL: the LISTEN connection's thread, at each
    /// NOTIFY; SQLite: nothing (no process hears of another's commit).
    func wakeOnChanges(_ wake: @escaping @Sendable () -> Void)
    /// Stops what `wakeOnChanges` started, and waits for it to end.
    func stopWakingOnChanges()
    /// Jobs not yet finished (everything but dead letters).
    func liveJobCount() throws(StoreError) -> Int
    /// Whether a job is waiting to be claimed now (the deliverer's stall check).
    func hasDueJobs(now: Int64) throws(StoreError) -> Bool
    func stats() throws(StoreError) -> QueueStats
    /// A cheap query that fails when the database does not answer (`GET /health`).
    func ping() throws(StoreError)
    /// The database's schema version as this store found or left it at open: this release's, or a newer release's
    /// that keeps it working (a rolling upgrade under way; `migrate` says so).
    var databaseSchemaVersion: Int { get }
}

public typealias RelayStore = DeviceStore & JobQueue

extension JobQueue {
    /// Enqueues with no per-device cap (tools and tests that move jobs, not webhooks).
    public func enqueue(_ jobs: some Sequence<NewJob>, now: Int64, ttl: Duration) throws(StoreError) -> [EnqueueResult] {
        try enqueue(jobs, now: now, ttl: ttl, deviceCap: .max)
    }

    /// Replays up to `limit` matching dead letters with no per-device cap (tests). Returns how many.
    public func replayDeadLetters(_ filter: DeadLetterFilter, limit: Int, now: Int64, ttl: Duration) throws(StoreError) -> Int {
        try replayDeadLetters(filter, limit: limit, now: now, ttl: ttl, deviceCap: .max).replayed
    }
}

extension SQLiteStore: DeviceStore, JobQueue, SupportQueries {}
extension PostgresStore: DeviceStore, JobQueue, SupportQueries {}
