import Common
import HTTP2
import Queue

/// What the delivery loop makes of one APNs answer, in four named steps: the verdict (what APNs said of the push),
/// the breaker (what the answer says of APNs' health), the disposition (what becomes of the push: resent at once,
/// or an outcome for the store) and the metrics.
extension DeliveryEngine {
    /// One answered push on its way through the steps.
    struct AnsweredPush {
        /// The push as it was sent.
        let flight: InFlight
        let verdict: Verdict
        /// The connection that carried it (recycled when its provider token expired).
        let connection: HTTP2ClientConnection
        /// When the answer was handled (ms), the time every step uses.
        let now: Int64

        var job: ClaimedJob { flight.job }
    }

    /// What becomes of an answered push.
    enum Disposition {
        /// Queued to be sent again at once (refused stream, new provider token, the other APNs environment).
        case resent
        /// Recorded in the store with the loop's next batch.
        case recorded(JobOutcome)
    }

    /// When the loop took a turn's answers from the inbox: the time every answer of the turn is handled at. Read
    /// once a turn, not per answer: two clock reads an answer were about a twentieth of a microsecond each.
    struct AnswerTime {
        /// Wall clock (ms): what the store and the breaker record.
        let now: Int64
        /// What the APNs round trip is timed to.
        let instant: ContinuousClock.Instant
    }

    /// Turns one APNs answer, taken from the inbox at `time`, into an outcome (appended to `outcomes`) or a resend.
    func handle(_ answer: Answer, at time: AnswerTime, into outcomes: inout [JobOutcome]) {
        // Taken out with one lookup, and put back in the rare case it is another job's push: reading it first, then
        // setting nil, hashed twice and copied the push out and destroyed it twice (about 1,000 instructions an answer).
        guard let flight = loopState.inFlight.removeValue(forKey: answer.jobID) else { return }
        guard flight.job.publicID == answer.publicID else {
            loopState.inFlight[answer.jobID] = flight
            return
        }
        var verdict = verdict(for: answer.result, of: flight, at: time.instant)
        if verdict == .refreshProviderToken, tokens.expired(generation: flight.generation) == .tooYoung, flight.tokenRefused {
            // The push already went again on a new connection after the same answer, and APNs still calls a token
            // too young to renew expired: resending more would be a reconnect per answer, forever (a host whose
            // clock is off). It is retried with backoff and counts towards the outage breaker instead, which then
            // sends only probes. A single such answer is still resent, as before. The connection still goes: APNs
            // wedges one whose token it refused.
            verdict = .retry(reason: "ExpiredProviderToken", outage: true)
            pool(for: flight.environment).recycle(answer.connection)
            if loopState.clockWarnedGeneration != flight.generation {
                loopState.clockWarnedGeneration = flight.generation
                logger.error(
                    "APNs calls a provider token under 20 minutes old expired: this host's clock is probably wrong (check NTP); pushes are retried, and a new token is made once this one is 20 minutes old"
                )
            }
        }
        if case .success = answer.result { noteAnswerFromAPNs() }
        // Consumed: copying the push into the struct, and destroying both, cost about 600 instructions an answer.
        let answered = AnsweredPush(flight: consume flight, verdict: verdict, connection: answer.connection, now: time.now)
        updateBreaker(with: answered)
        guard case .recorded(var outcome) = disposition(of: answered) else { return }
        if case .removeDevice = outcome.kind, tokenReplaced(since: answered.job) {
            // APNs refused a token the app has replaced since: the device stays and the push goes to the new token
            // (the store checks again as it records, for a token replaced in between).
            outcome.kind = .postpone(until: answered.now)
        }
        recordMetrics(of: outcome, for: answered)
        outcomes.append(outcome)
    }

    /// Whether the device now has another token than the one `job`'s push went to (a PATCH while it was in
    /// flight). Read only for a 410, which is rare; a device that cannot be read counts as unchanged.
    private func tokenReplaced(since job: ClaimedJob) -> Bool {
        guard let device = try? store.device(id: job.deviceID) else { return false }
        return device.token != job.deviceToken
    }

    /// Step 1: what APNs said, or what the transport's failure means. Times the request when APNs answered.
    private func verdict(for result: Result<HTTP2Response, HTTP2Failure>, of flight: InFlight, at instant: ContinuousClock.Instant) -> Verdict {
        switch result {
        case .success(let response):
            perPush.apnsRequest.observe((instant - flight.started).seconds)
            return Verdict.forResponse(status: response.status, reason: Verdict.reason(fromBody: response.body))
        case .failure(.refused):
            return .resend
        case .failure(.timedOut):
            return .retry(reason: "Timeout", outage: true)
        case .failure(.connectionLost):
            return .retry(reason: "ConnectionLost", outage: true)
        case .failure(.reset(let code)):
            return .retry(reason: "StreamReset\(code)", outage: true)
        }
    }

    /// Step 2: the outage breaker and the stall detector, and what the engine does when the breaker changes state.
    /// They watch the configured environment; the other one's answers say nothing about its health (and its
    /// failures only retry the pushes that went there).
    private func updateBreaker(with answered: AnsweredPush) {
        guard answered.flight.environment == configuration.environment else { return }
        let now = answered.now
        switch recordHealth(answered.verdict, jobID: answered.job.id, now: now) {
        case .opened:
            logger.error("APNs outage: most recent pushes failed; pausing, probing with one push at a time")
        case .recovered:
            try? store.recordPause(worker: configuration.worker, reason: nil, now: now)
            let due = (try? store.makeRetryableDue(now: now)) ?? 0
            logger.info("APNs answers again: sending the backlog now", ["jobs.due": String(due)])
            loopState.claimDue = true
        case .paused(let reason):
            recordPause(reason, now: now)
            logger.error(
                "APNs rejects our credentials or topic: delivery paused, jobs kept. Fix APNS_KEY_ID, APNS_TEAM_ID, APP_BUNDLE_IDENTIFIER or the key, then restart",
                ["apns.reason": reason])
        case .none:
            break
        }
    }

    /// Step 3: the push goes again at once (to the other environment, after a refused stream, with a new provider
    /// token; at most five times), or it gets its queue outcome.
    private func disposition(of answered: AnsweredPush) -> Disposition {
        // The push is read where it lies (`answered.flight`), not copied out into a local: a copy and its destruction
        // per answer.
        let verdict = answered.verdict
        if switchEnvironment(after: verdict, flight: answered.flight) { return .resent }
        learnEnvironment(from: verdict, flight: answered.flight)
        switch verdict {
        case .resend where answered.flight.resends < 5:
            resend(answered.flight)
            return .resent
        case .refreshProviderToken where answered.flight.resends < 5:
            // The token was renewed in `handle` (step 1), when it was old enough.
            pool(for: answered.flight.environment).recycle(answered.connection)
            resend(answered.flight, afterExpiredToken: true)
            return .resent
        default:
            break
        }
        var outcome = Self.outcome(
            for: finalVerdict(verdict, of: answered.flight), job: answered.flight.job, backoff: configuration.backoff, now: answered.now)
        switch outcome.kind {
        // The merged jobs end with the digest when APNs accepted or rejected it. Not when the relay gives up on the
        // head (`abandon`: its JOB_TTL ran out while it was retried): they were accepted later, their own TTLs may
        // have hours left, and they wait as they were and go out behind it.
        case .delivered, .deadLetter: outcome.merged = answered.flight.merged
        case .abandon: break
        case .retry(let at, _): loopState.nextRetryAt = min(loopState.nextRetryAt ?? at, at)
        case .removeDevice, .postpone: break
        }
        return .recorded(outcome)
    }

    /// A push the configured environment refused as `BadDeviceToken` and the other one cannot take at all (its
    /// configuration fault: a key made for one environment only, `BadEnvironmentKeyInToken`) is refused by both:
    /// dead-lettered with the first refusal (SPEC §4), not retried until JOB_TTL with two requests per attempt. The
    /// other environment's faults never pause the configured one (`updateBreaker`).
    private func finalVerdict(_ verdict: Verdict, of flight: InFlight) -> Verdict {
        guard flight.switched, flight.environment != configuration.environment, case .pause(let reason) = verdict else {
            return verdict
        }
        // The dead letter says BadDeviceToken (the configured environment's refusal, what `replay --reason` finds);
        // the other environment's own fault is said here, or an operator would only see a token problem.
        logger.warning(
            "the other APNs environment refuses our credentials or topic, so pushes it should take are dead-lettered as BadDeviceToken",
            ["apns.environment": flight.environment.rawValue, "apns.reason": reason])
        return .deadLetter(reason: "BadDeviceToken")
    }

    private func resend(_ flight: InFlight, afterExpiredToken: Bool = false) {
        loopState.resendQueue.append(
            Resend(
                job: flight.job, resends: flight.resends + 1, environment: flight.environment,
                switched: flight.switched, tokenRefused: flight.tokenRefused || afterExpiredToken))
    }

    /// Step 4: the delivery counters, and a warning for a dead letter. Only pushes APNs accepted count towards
    /// DEVICE_BURST (the store counts them as it records the delivery): failed attempts during an outage put
    /// nothing on the phone, and must not turn the backlog into digests.
    private func recordMetrics(of outcome: JobOutcome, for answered: AnsweredPush) {
        if case .delivered = outcome.kind, case .delivered = answered.verdict {
            perPush.delivered.increment()
        } else {
            metrics.increment("kumapush_deliveries_total", [("outcome", Self.label(outcome.kind)), ("reason", Self.reason(answered.verdict))])
        }
        switch outcome.kind {
        case .removeDevice:
            metrics.increment("kumapush_devices_removed_total")
        case .deadLetter(let reason), .abandon(let reason):
            perPush.deadLettered.increment()
            let job = answered.job
            logger.warning("push dead-lettered", ["job.id": job.publicID, "reason": reason, "device.token": Redact.token(job.deviceToken)])
        case .delivered, .retry, .postpone:
            break
        }
    }

    /// A push dead-lettered without being sent (it outlived JOB_TTL waiting, or cannot be built), counted and logged as
    /// an answered one is: `kumapush_deliveries_total{outcome="dead_letter"}`, which the dead-letter alert watches, missed
    /// exactly the alerts an outage or a stopped deliverer let expire.
    func abandonedUnsent(_ job: ClaimedJob, reason: String) -> JobOutcome {
        metrics.increment("kumapush_deliveries_total", [("outcome", "dead_letter"), ("reason", reason)])
        perPush.deadLettered.increment()
        logger.warning("push dead-lettered", ["job.id": job.publicID, "reason": reason, "device.token": Redact.token(job.deviceToken)])
        return JobOutcome(job, kind: .abandon(reason: reason))
    }

    /// The queue outcome of a verdict: retries wait with full-jitter backoff, and a job whose next try would fall
    /// after its JOB_TTL is dead-lettered as `Expired` instead.
    static func outcome(for verdict: Verdict, job: ClaimedJob, backoff: Backoff, now: Int64) -> JobOutcome {
        let kind: JobOutcome.Kind
        switch verdict {
        case .delivered: kind = .delivered
        case .removeDevice(let reason): kind = .removeDevice(reason: reason)
        case .deadLetter(let reason): kind = .deadLetter(reason: reason)
        case .retry(let reason, _), .pause(let reason):
            let at = now + max(1, backoff.delayMillis(afterAttempt: job.attempt))
            kind = at > job.expiresAt ? .abandon(reason: "Expired") : .retry(at: at, error: reason)
        case .resend, .refreshProviderToken:
            // Only reached when resending kept failing: treat as a transient failure.
            let at = now + max(1, backoff.delayMillis(afterAttempt: job.attempt))
            kind = at > job.expiresAt ? .abandon(reason: "Expired") : .retry(at: at, error: "Refused")
        }
        return JobOutcome(job, kind: kind)
    }

    static func label(_ kind: JobOutcome.Kind) -> String {
        switch kind {
        case .delivered: return "delivered"
        case .retry: return "retry"
        case .deadLetter, .abandon: return "dead_letter"
        case .removeDevice: return "device_removed"
        case .postpone: return "postponed"
        }
    }

    static func reason(_ verdict: Verdict) -> String {
        switch verdict {
        case .delivered: return ""
        case .removeDevice(let reason), .deadLetter(let reason), .retry(let reason, _), .pause(let reason): return reason
        case .resend: return "Refused"
        case .refreshProviderToken: return "ExpiredProviderToken"
        }
    }
}
