import Common
import Queue

/// Delivery never stalls (SPEC §4): the probe is settled whatever happened to its job, and a deliverer that
/// has due jobs, no known APNs failure and has sent nothing for STALL_TIMEOUT resets itself and says so.
extension DeliveryEngine {
    /// A probe whose job left without an answer from APNs (expired, postponed, unbuildable, its device gone) is
    /// given back to the breaker, so the next job probes instead of the breaker waiting for an answer that never
    /// comes. Runs after every claim and every batch of answers.
    func settleProbe() {
        let state = loopState
        guard let probe = state.breaker.probe, state.inFlight[probe.jobID] == nil,
            !state.resendQueue.contains(where: { $0.job.id == probe.jobID })
        else { return }
        state.breaker.probeEnded(jobID: probe.jobID)
        state.claimDue = true
    }

    /// One answer from the configured environment, for the detector and the breaker.
    func recordHealth(_ verdict: Verdict, jobID: Int64, now: Int64) -> OutageBreaker.Transition {
        noteHealth(of: verdict)
        return loopState.breaker.record(verdict, jobID: jobID, now: now)
    }

    /// Keeps the detector's view of APNs: an outage-class failure or a configuration fault means APNs is known to
    /// be failing.
    func noteHealth(of verdict: Verdict) {
        switch verdict {
        case .retry(_, outage: true), .pause:
            loopState.lastFailureAt = .now
        default:
            break
        }
    }

    /// APNs (either environment) answered a push: this deliverer is not stalled. A request the transport failed
    /// does not say so: a stall's own reset fails the requests the recycled connections still held, and those
    /// failures must not clear the report the moment it is made.
    func noteAnswerFromAPNs() {
        if stalled.exchange(false, ordering: .relaxed) {
            logger.info("delivery resumed after a stall")
        }
    }

    /// A store call of the loop whose failure the loop otherwise shrugs off (the next turn calls again), noted for
    /// the detector: on a database host that vanished silently such a call holds the loop for seconds before it
    /// fails, and a stall seen right after it is the database's.
    func noteDatabaseFailure<T>(of call: () throws -> T) -> T? {
        do {
            return try call()
        } catch {
            loopState.lastDatabaseFailureAt = .now
            return nil
        }
    }

    /// The liveness rule, checked once a second. Cheap: the database is asked only after STALL_TIMEOUT of silence.
    /// After a report, a full STALL_TIMEOUT passes (for the reset to work) before it counts as another stall.
    func checkLiveness(now: Int64) {
        let state = loopState
        let timeout = configuration.stallTimeout
        guard ContinuousClock.now - state.lastSentAt >= timeout, !state.breaker.isPaused else { return }
        if let failed = state.lastFailureAt, ContinuousClock.now - failed < timeout { return }
        switch try? store.hasDueJobs(now: now) {
        case true?:
            break
        case false?:
            // Nothing is due any more (the jobs expired, their devices went): whatever stalled has nothing to stall.
            if stalled.exchange(false, ordering: .relaxed) { logger.info("no jobs due any more: no longer stalled") }
            return
        case nil:
            return
        }
        // The database failing is what kept this deliverer from sending (a claim or a record failed, or a statement
        // on a vanished server held the loop until it failed): the APNs connections are not the problem, and
        // resetting them would only cost the handshakes when the database is back.
        let databaseFailed = state.lastDatabaseFailureAt.map { ContinuousClock.now - $0 < timeout } ?? false
        if databaseFailed {
            logger.error(
                "delivery stalled: database unavailable: jobs are due and nothing was sent for STALL_TIMEOUT because the database did not answer; APNs is not at fault, its connections are kept",
                ["stall_timeout": String(describing: timeout)])
        } else {
            logger.error(
                "delivery stalled: jobs are due, APNs is not known to be failing, and nothing was sent for STALL_TIMEOUT; resetting the outage breaker and the APNs connections",
                ["stall_timeout": String(describing: timeout)])
        }
        // The flag before the counter: whoever sees the stall counted (a scrape, a test) also sees /health say so.
        stalled.store(true, ordering: .relaxed)
        metrics.increment("kumapush_delivery_stalls_total")
        metrics.increment("relay_delivery_stalls_total")
        state.lastSentAt = .now
        guard !databaseFailed else { return }
        state.breaker.reset()
        pool.recycleAll()
        state.claimDue = true
    }
}
