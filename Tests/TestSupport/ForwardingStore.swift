import Common
import Queue

/// Passes every call to a real store; tests subclass it to make one operation fail the way a sick disk would.
/// `finishThenClaim` is not passed on: the protocol's own version calls `finish` and `claim` here, so a subclass that
/// counts or fails one of them sees the delivery loop's calls too.
/// @unchecked Sendable: it holds only the (Sendable) inner store; subclasses add no state.
open class ForwardingStore: RelayStore, @unchecked Sendable {
    public let inner: SQLiteStore
    public init(inner: SQLiteStore) { self.inner = inner }

    open func ping() throws(StoreError) { try inner.ping() }
    open var databaseSchemaVersion: Int { inner.databaseSchemaVersion }
    open func enqueue(_ jobs: some Sequence<NewJob>, now: Int64, ttl: Duration, deviceCap: Int) throws(StoreError) -> [EnqueueResult] {
        try inner.enqueue(jobs, now: now, ttl: ttl, deviceCap: deviceCap)
    }
    open func registerDevice(token: String, authTokenHash: String, now: Int64, newID: () throws -> String) throws(StoreError) -> Registration {
        try inner.registerDevice(token: token, authTokenHash: authTokenHash, now: now, newID: newID)
    }
    open func device(id: String) throws(StoreError) -> Device? { try inner.device(id: id) }
    open func updateDevice(id: String, token: String?, level: Device.DownNotificationLevel?) throws(StoreError) -> Device? {
        try inner.updateDevice(id: id, token: token, level: level)
    }
    open func deleteDevice(id: String, now: Int64) throws(StoreError) -> Bool { try inner.deleteDevice(id: id, now: now) }
    open func tombstone(deviceID: String) throws(StoreError) -> Tombstone? { try inner.tombstone(deviceID: deviceID) }
    open func importDevice(_ device: Device) throws(StoreError) -> Bool { try inner.importDevice(device) }
    open func hasDevice(id: String, orToken token: String) throws(StoreError) -> Bool { try inner.hasDevice(id: id, orToken: token) }
    open func purgeTombstones(before: Int64) throws(StoreError) -> Int { try inner.purgeTombstones(before: before) }
    open var concurrentEnqueues: Int { inner.concurrentEnqueues }
    open func claim(worker: String, limit: Int, now: Int64, lease: Duration) throws(StoreError) -> [ClaimedJob] {
        try inner.claim(worker: worker, limit: limit, now: now, lease: lease)
    }
    open func finish(_ outcomes: [JobOutcome], worker: String, now: Int64) throws(StoreError) -> [Bool] {
        try inner.finish(outcomes, worker: worker, now: now)
    }
    open func release(jobIDs: [Int64], worker: String, now: Int64) throws(StoreError) -> Int {
        try inner.release(jobIDs: jobIDs, worker: worker, now: now)
    }
    open func pendingJobs(deviceID: String, limit: Int) throws(StoreError) -> [PendingJob] { try inner.pendingJobs(deviceID: deviceID, limit: limit) }
    open func carryBacklog(deviceID: String, limit: Int, minimum: Int, deviceCap: Int) throws(StoreError) -> [PendingJob] {
        try inner.carryBacklog(deviceID: deviceID, limit: limit, minimum: minimum, deviceCap: deviceCap)
    }
    open func rescueExpiredLeases(now: Int64) throws(StoreError) -> Int { try inner.rescueExpiredLeases(now: now) }
    open func leaseHolders() throws(StoreError) -> [String] { try inner.leaseHolders() }
    open func takeBackLeases(of worker: String, now: Int64) throws(StoreError) -> Int { try inner.takeBackLeases(of: worker, now: now) }
    open func makeRetryableDue(now: Int64) throws(StoreError) -> Int { try inner.makeRetryableDue(now: now) }
    open func makeNextRetryDue(now: Int64) throws(StoreError) -> Bool { try inner.makeNextRetryDue(now: now) }
    open func countDeadLetters(_ filter: DeadLetterFilter) throws(StoreError) -> Int { try inner.countDeadLetters(filter) }
    open func lastDeadLetterID(_ filter: DeadLetterFilter) throws(StoreError) -> Int64? { try inner.lastDeadLetterID(filter) }
    open func replayDeadLetters(
        _ filter: DeadLetterFilter, limit: Int, now: Int64, ttl: Duration, deviceCap: Int
    ) throws(StoreError) -> ReplayBatch {
        try inner.replayDeadLetters(filter, limit: limit, now: now, ttl: ttl, deviceCap: deviceCap)
    }
    open func purgeDeadLetters(before: Int64) throws(StoreError) -> Int { try inner.purgeDeadLetters(before: before) }
    open func liveJobCount() throws(StoreError) -> Int { try inner.liveJobCount() }
    open func hasDueJobs(now: Int64) throws(StoreError) -> Bool { try inner.hasDueJobs(now: now) }
    open func reportedOutcomes(publicIDs: [String]) throws(StoreError) -> [String: ReportedOutcome] {
        try inner.reportedOutcomes(publicIDs: publicIDs)
    }
    open func purgeDeadLetters(keeping: Int) throws(StoreError) -> Int { try inner.purgeDeadLetters(keeping: keeping) }
    open func setEnvironment(deviceID: String, token: String, environment: Settings.APNsEnvironment) throws(StoreError) {
        try inner.setEnvironment(deviceID: deviceID, token: token, environment: environment)
    }
    open func recordPause(worker: String, reason: String?, now: Int64) throws(StoreError) {
        try inner.recordPause(worker: worker, reason: reason, now: now)
    }
    open func currentPause(since: Int64) throws(StoreError) -> String? { try inner.currentPause(since: since) }
    open func reportedOutcome(publicID: String) throws(StoreError) -> ReportedOutcome? { try inner.reportedOutcome(publicID: publicID) }
    open func purgeReportedOutcomes(before: Int64) throws(StoreError) -> Int { try inner.purgeReportedOutcomes(before: before) }
    open func changeCounter() throws(StoreError) -> Int64 { try inner.changeCounter() }
    open func wakeOnChanges(_ wake: @escaping @Sendable () -> Void) { inner.wakeOnChanges(wake) }
    open func stopWakingOnChanges() { inner.stopWakingOnChanges() }
    open func stats() throws(StoreError) -> QueueStats { try inner.stats() }
}
