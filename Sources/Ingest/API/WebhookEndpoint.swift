import Common
import Foundation
import Queue

/// `POST|GET /wh/:deviceId` (SPEC §2.2): validate, hand the job to the group-commit writer, answer 202 only once
/// it is committed. Nothing here waits on disk on an MHD thread.
struct WebhookEndpoint: Sendable {
    let store: any RelayStore
    let writer: QueueWriter
    let clock: any WallClock
    let queueMax: Int
    /// How long a Test-button webhook waits for APNs' answer (SPEC §2.2); zero answers 202 at once.
    let testWait: Duration
    /// Per client IP: failures (400/404/410) only; once over, every webhook from that IP gets 429.
    let failedLimiter: SlidingWindowLimiter
    /// Per client IP and device: every webhook.
    let webhookLimiter: SlidingWindowLimiter
    let logger: Logger

    static let retryAfterSeconds = "5"

    func handle(_ request: HTTPRequest, deviceID: String, client: String, responder: any HTTPResponder) {
        let now = clock.nowMillis()
        if case .limited(let seconds) = failedLimiter.check(client, now: now) {
            return responder.respond(.error(429, "too many requests", headers: [("Retry-After", String(seconds))]))
        }
        if case .limited(let seconds) = webhookLimiter.hit(client + "|" + deviceID, now: now) {
            return responder.respond(.error(429, "too many requests", headers: [("Retry-After", String(seconds))]))
        }
        guard DeviceID.isWellFormed(deviceID) else {
            return fail(.error(404, "device not found"), client: client, responder: responder)
        }
        let event: AlertEvent
        switch WebhookParser.parse(request) {
        case .success(let parsed): event = parsed
        case .failure(.invalidBody(let reason)):
            return fail(.error(400, "invalid request body: \(reason)"), client: client, responder: responder)
        case .failure(.unsupportedMediaType):
            return responder.respond(.error(415, "unsupported content type: send JSON, a form or text/plain"))
        }
        guard writer.estimatedDepth < queueMax else {
            logger.warning("queue full, webhook refused", ["queue.max": String(queueMax)])
            return responder.respond(Self.queueUnavailable)
        }
        let payload = event.boundedForStorage.jobPayload
        let waits = event.waitsForDelivery && testWait > .zero
        guard let publicID = try? JobID.generate() else { return responder.respond(.error(500, "internal server error")) }
        let job = NewJob(deviceID: deviceID, publicID: publicID, payload: payload, reportsOutcome: waits, monitor: MonitorReport(event))
        writer.submit(job) { result in
            switch result {
            case .success(.queued) where waits:
                let deadline = ContinuousClock.now + testWait
                DispatchQueue.global().async { awaitOutcome(of: job.publicID, until: deadline, responder: responder) }
            case .success(.queued):
                responder.respond(Self.queued(job.publicID))
            case .success(.merged):
                // Stored, folded into the device's waiting digest (DEVICE_QUEUE_MAX): acknowledged like any alert.
                responder.respond(Self.merged)
            case .success(.deviceGone):
                // Off the writer thread: the tombstone lookup reads the disk and the writer must keep committing.
                DispatchQueue.global().async { answerUnknownDevice(deviceID, client: client, responder: responder) }
            case .failure(let error):
                logger.error("webhook not stored", ["error": error.description])
                responder.respond(Self.queueUnavailable)
            }
        }
    }

    static func queued(_ publicID: String) -> HTTPResponse {
        .json(202, "{\"status\":\"queued\",\"id\":\"\(publicID)\"}")
    }

    static let merged = HTTPResponse.json(202, "{\"status\":\"merged\"}")

    /// A paused deliverer refreshes its record every few seconds; one older than this is from a process that died.
    static let pauseFreshness: Int64 = 30_000

    /// Polls for the outcome a deliverer (this process's or another's) records for a Test push, every 10 ms on a
    /// timer (no thread waits): 200 delivered, 410 unregistered, 502 rejected or not delivered, 502 at once while a
    /// deliverer is paused by a configuration fault, or 202 when TEST_WAIT runs out (SPEC §2.2: a Test button never
    /// says "sent" for a push that cannot arrive).
    private func awaitOutcome(of publicID: String, until deadline: ContinuousClock.Instant, responder: any HTTPResponder) {
        let outcome = try? store.reportedOutcome(publicID: publicID)
        switch outcome?.kind {
        case .delivered?:
            responder.respond(.json(200, "{\"status\":\"delivered\"}"))
        case .unregistered?:
            responder.respond(.error(410, "device unregistered"))
        case .rejected?:
            responder.respond(.error(502, "apns rejected: \(outcome?.reason ?? "")"))
        case .failed?:
            responder.respond(.error(502, "not delivered: \(outcome?.reason ?? "")"))
        case nil:
            if let pause = try? store.currentPause(since: clock.nowMillis() - Self.pauseFreshness) {
                return responder.respond(.error(502, "relay cannot deliver: \(pause) (configuration)"))
            }
            guard ContinuousClock.now < deadline else { return responder.respond(Self.queued(publicID)) }
            DispatchQueue.global().asyncAfter(deadline: .now() + 0.01) {
                awaitOutcome(of: publicID, until: deadline, responder: responder)
            }
        }
    }

    /// 410 for a device APNs reported gone (within TOMBSTONE_RETENTION), else 404.
    private func answerUnknownDevice(_ deviceID: String, client: String, responder: any HTTPResponder) {
        do {
            let gone = try store.tombstone(deviceID: deviceID) != nil
            fail(gone ? .error(410, "device unregistered") : .error(404, "device not found"), client: client, responder: responder)
        } catch {
            responder.respond(Self.queueUnavailable)
        }
    }

    private func fail(_ response: HTTPResponse, client: String, responder: any HTTPResponder) {
        failedLimiter.record(client, now: clock.nowMillis())
        responder.respond(response)
    }

    static let queueUnavailable = HTTPResponse.error(503, "queue unavailable", headers: [("Retry-After", retryAfterSeconds)])
}
