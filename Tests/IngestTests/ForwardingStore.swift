import Common
import Queue

/// Passes every call to a real store; tests subclass it to make one operation fail the way a sick disk would.
/// @unchecked Sendable: it holds only the (Sendable) inner store; subclasses add no state.
class ForwardingStore: RelayStore, @unchecked Sendable {
    let inner: SQLiteStore
    init(inner: SQLiteStore) { self.inner = inner }

    func ping() throws(StoreError) { try inner.ping() }
    func enqueue(_ jobs: some Sequence<NewJob>, now: Int64, ttl: Duration, deviceCap: Int) throws(StoreError) -> [EnqueueResult] {
        try inner.enqueue(jobs, now: now, ttl: ttl, deviceCap: deviceCap)
    }
    func registerDevice(token: String, authTokenHash: String, now: Int64, newID: () throws -> String) throws(StoreError) -> Registration {
        try inner.registerDevice(token: token, authTokenHash: authTokenHash, now: now, newID: newID)
    }
    func device(id: String) throws(StoreError) -> Device? { try inner.device(id: id) }
    func updateDevice(id: String, token: String?, level: Device.DownNotificationLevel?) throws(StoreError) -> Device? {
        try inner.updateDevice(id: id, token: token, level: level)
    }
    func deleteDevice(id: String, now: Int64) throws(StoreError) -> Bool { try inner.deleteDevice(id: id, now: now) }
    func tombstone(deviceID: String) throws(StoreError) -> Tombstone? { try inner.tombstone(deviceID: deviceID) }
    func importDevice(_ device: Device) throws(StoreError) -> Bool { try inner.importDevice(device) }
    func hasDevice(id: String, orToken token: String) throws(StoreError) -> Bool { try inner.hasDevice(id: id, orToken: token) }
    func purgeTombstones(before: Int64) throws(StoreError) -> Int { try inner.purgeTombstones(before: before) }
    var concurrentEnqueues: Int { inner.concurrentEnqueues }
    func claim(worker: String, limit: Int, now: Int64, lease: Duration) throws(StoreError) -> [ClaimedJob] {
        try inner.claim(worker: worker, limit: limit, now: now, lease: lease)
    }
    func finish(_ outcomes: [JobOutcome], worker: String, now: Int64) throws(StoreError) -> [Bool] {
        try inner.finish(outcomes, worker: worker, now: now)
    }
    func release(jobIDs: [Int64], worker: String, now: Int64) throws(StoreError) -> Int {
        try inner.release(jobIDs: jobIDs, worker: worker, now: now)
    }
    func pendingJobs(deviceID: String, limit: Int) throws(StoreError) -> [PendingJob] { try inner.pendingJobs(deviceID: deviceID, limit: limit) }
    func rescueExpiredLeases(now: Int64) throws(StoreError) -> Int { try inner.rescueExpiredLeases(now: now) }
    func makeRetryableDue(now: Int64) throws(StoreError) -> Int { try inner.makeRetryableDue(now: now) }
    func makeNextRetryDue(now: Int64) throws(StoreError) -> Bool { try inner.makeNextRetryDue(now: now) }
    func countDeadLetters(_ filter: DeadLetterFilter) throws(StoreError) -> Int { try inner.countDeadLetters(filter) }
    func replayDeadLetters(_ filter: DeadLetterFilter, limit: Int, now: Int64, ttl: Duration) throws(StoreError) -> Int {
        try inner.replayDeadLetters(filter, limit: limit, now: now, ttl: ttl)
    }
    func purgeDeadLetters(before: Int64) throws(StoreError) -> Int { try inner.purgeDeadLetters(before: before) }
    func liveJobCount() throws(StoreError) -> Int { try inner.liveJobCount() }
    func hasDueJobs(now: Int64) throws(StoreError) -> Bool { try inner.hasDueJobs(now: now) }
    func reportedOutcomes(publicIDs: [String]) throws(StoreError) -> [String: ReportedOutcome] {
        try inner.reportedOutcomes(publicIDs: publicIDs)
    }
    func purgeDeadLetters(keeping: Int) throws(StoreError) -> Int { try inner.purgeDeadLetters(keeping: keeping) }
    func setEnvironment(deviceID: String, token: String, environment: Settings.APNsEnvironment) throws(StoreError) {
        try inner.setEnvironment(deviceID: deviceID, token: token, environment: environment)
    }
    func recordPause(worker: String, reason: String?, now: Int64) throws(StoreError) {
        try inner.recordPause(worker: worker, reason: reason, now: now)
    }
    func currentPause(since: Int64) throws(StoreError) -> String? { try inner.currentPause(since: since) }
    func reportedOutcome(publicID: String) throws(StoreError) -> ReportedOutcome? { try inner.reportedOutcome(publicID: publicID) }
    func purgeReportedOutcomes(before: Int64) throws(StoreError) -> Int { try inner.purgeReportedOutcomes(before: before) }
    func changeCounter() throws(StoreError) -> Int64 { try inner.changeCounter() }
    func stats() throws(StoreError) -> QueueStats { try inner.stats() }
}
