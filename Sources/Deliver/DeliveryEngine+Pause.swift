import Common
import Queue

/// A pause for a configuration fault is written to the store, so a waiting Test request in any ingest process is
/// answered 502 at once (SPEC §2.2) instead of timing out into a 202 that says nothing.
extension DeliveryEngine {
    static let pauseRefreshInterval: Int64 = 10_000

    func recordPause(_ reason: String, now: Int64) {
        do {
            try store.recordPause(worker: configuration.worker, reason: reason, now: now)
            loopState.pauseRecordedAt = now
        } catch {
            logger.error("cannot record the delivery pause", ["error": error.description])
        }
    }

    /// Keeps the record fresh while the pause lasts (readers ignore records older than 30 s: a dead process's).
    func refreshPause(now: Int64) {
        guard case .paused(let reason, _) = loopState.breaker.state,
            now - loopState.pauseRecordedAt >= Self.pauseRefreshInterval
        else { return }
        recordPause(reason, now: now)
    }
}
