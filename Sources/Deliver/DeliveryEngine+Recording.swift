import Common
import Queue

/// Recording a turn's outcomes (`finish`), alone or in the claim's transaction, and keeping them while the database
/// is unreachable.
extension DeliveryEngine {
    /// At most this many outcomes wait for an unreachable database; beyond it they are dropped (their leases
    /// expire and the jobs go again) rather than grow without bound.
    static let maximumUnrecorded = 100_000

    func record(_ outcomes: [JobOutcome]) {
        let batch = batchToRecord(outcomes)
        do {
            let started = ContinuousClock.now
            _ = try store.finish(batch, worker: configuration.worker, now: clock.nowMillis())
            metrics.observe("kumapush_delivery_store_seconds", [("operation", "finish")], value: (ContinuousClock.now - started).seconds)
            recorded(batch)
        } catch {
            recordingFailed(batch, error)
        }
    }

    /// `outcomes` behind those an unreachable database kept waiting.
    func batchToRecord(_ outcomes: [JobOutcome]) -> [JobOutcome] {
        // `+` on an empty array still copies every outcome into a new one (four strings retained each).
        loopState.unrecorded.isEmpty ? outcomes : loopState.unrecorded + outcomes
    }

    func recorded(_ batch: [JobOutcome]) {
        let state = loopState
        metrics.observe("kumapush_delivery_batch_size", value: Double(batch.count))
        if !state.unrecorded.isEmpty {
            logger.info("recorded delivery results kept while the database was unreachable", ["count": String(state.unrecorded.count)])
            state.unrecorded = []
        }
        // A finished head lets the device's next job become due: look again at once.
        state.claimDue = true
    }

    func recordingFailed(_ batch: [JobOutcome], _ error: StoreError) {
        let state = loopState
        if error.code == .unavailable && batch.count <= Self.maximumUnrecorded {
            if state.unrecorded.isEmpty {
                logger.error(
                    "recording delivery results failed: kept until the database answers",
                    ["error": error.description, "count": String(batch.count)])
            }
            state.unrecorded = batch
            state.unrecordedRetryAt = .now + .milliseconds(200)
            state.lastDatabaseFailureAt = .now
        } else {
            // The leases expire and the jobs are retried; nothing is lost, at worst sent twice.
            logger.error("recording delivery results failed", ["error": error.description, "count": String(batch.count)])
            state.unrecorded = []
        }
    }

    /// `outcomes` recorded and the heads they let through claimed, in one store call. When recording fails, it is
    /// handled as `record`'s failure, and the claim runs alone only if one was due anyway (as it did after a failed
    /// `record`): the answers it would have let through are not recorded.
    func recordThenClaim(_ outcomes: [JobOutcome], limit: Int, now: Int64) -> [ClaimedJob]? {
        let state = loopState
        let batch = batchToRecord(outcomes)
        let wasDue = state.claimDue
        let started = ContinuousClock.now
        let result: FinishedThenClaimed
        do {
            result = try store.finishThenClaim(batch, worker: configuration.worker, now: now, claimLimit: limit, lease: configuration.lease)
        } catch {
            recordingFailed(batch, error)
            return wasDue ? claim(limit: limit, allowance: .normal, now: now) : nil
        }
        metrics.observe("kumapush_delivery_store_seconds", [("operation", "finish")], value: result.finishTime.seconds)
        recorded(batch)
        state.claimDue = false
        switch result.claimed {
        case .success(let jobs):
            metrics.observe(
                "kumapush_delivery_store_seconds", [("operation", "claim")], value: (ContinuousClock.now - started - result.finishTime).seconds)
            return jobs
        case .failure(let error):
            logger.error("claim failed", ["error": error.description])
            state.lastDatabaseFailureAt = .now
            return nil
        }
    }
}
