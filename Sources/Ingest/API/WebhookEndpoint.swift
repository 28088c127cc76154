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
    /// DEVICE_QUEUE_MAX, for the log line of a refusal.
    let deviceCap: Int
    /// How long a Test-button webhook waits for APNs' answer (SPEC §2.2); zero answers 202 at once.
    let testWait: Duration
    /// Per client IP: failures (400/404/410). Past it, the client gets 429 for unknown device ids only: a device
    /// that exists is never refused because the same Uptime Kuma also posts to a stale URL (SPEC §2.4).
    let failedLimiter: SlidingWindowLimiter
    /// Per client IP and device: every webhook (`RATE_LIMIT_WEBHOOK`, off by default).
    let webhookLimiter: SlidingWindowLimiter
    /// Per client IP over all devices: every webhook (`RATE_LIMIT_WEBHOOK_IP`).
    let clientLimiter: SlidingWindowLimiter
    /// Holds waiting Test requests and answers them from one poll.
    let testWaiter: TestOutcomeWaiter
    let logger: Logger

    static let retryAfterSeconds = "5"

    func handle(_ request: HTTPRequest, deviceID: String, client: String, responder: any HTTPResponder) {
        let now = clock.nowMillis()
        if case .limited(let seconds) = clientLimiter.hit(client, now: now) {
            return responder.respond(Self.tooManyRequests(seconds))
        }
        // Decided now, applied only once the device turns out not to exist.
        let overFailedLimit = failedLimiter.check(client, now: now)
        guard DeviceID.isWellFormed(deviceID) else {
            if case .limited(let seconds) = overFailedLimit { return responder.respond(Self.tooManyRequests(seconds)) }
            return fail(.error(404, "device not found"), client: client, responder: responder)
        }
        // The id is well-formed before it becomes part of a limiter key.
        if case .limited(let seconds) = webhookLimiter.hit(client + "|" + deviceID, now: now) {
            return responder.respond(Self.tooManyRequests(seconds))
        }
        let event: AlertEvent
        switch WebhookParser.parse(request) {
        case .success(let parsed): event = parsed
        case .failure(.invalidBody(let reason)):
            return refuseBody(
                .error(400, "invalid request body: \(reason)"), counted: true, deviceID: deviceID, client: client,
                overFailedLimit: overFailedLimit, responder: responder)
        case .failure(.unsupportedMediaType):
            return refuseBody(
                .error(415, "unsupported content type: send JSON, a form or text/plain"), counted: false, deviceID: deviceID,
                client: client, overFailedLimit: overFailedLimit, responder: responder)
        }
        guard writer.acceptsMore else {
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
                // Past the waiter's capacity the Test request is answered at once (SPEC §2.2 allows 202), unless
                // delivery is paused. Off the writer thread: that answer reads the store.
                if !testWaiter.wait(for: job.publicID, until: .now + testWait, responder: responder) {
                    testWaiter.respondAtOnce(responder, otherwise: Self.queued(job.publicID))
                }
            case .success(.queued), .success(.queuedAsAlert):
                // An alert, or a Test request kept as one (another Test waits, or the device is at its cap): at once.
                responder.respond(Self.queued(job.publicID))
            case .success(.sameAsWaitingTest(let waitingID)):
                // The Test button pressed again while its first push waits (SPEC §4): nothing new was stored. Off the
                // writer thread: the answer reads whether delivery is paused.
                testWaiter.respondAtOnce(responder, otherwise: Self.queued(waitingID))
            case .success(.merged) where waits:
                // The Test button at DEVICE_QUEUE_MAX, folded into the digest: 202 merged, or 502 while delivery is
                // paused. Off the writer thread, as above.
                testWaiter.respondAtOnce(responder, otherwise: Self.merged)
            case .success(.merged):
                // Stored, folded into the device's waiting digest (DEVICE_QUEUE_MAX): acknowledged like any alert.
                responder.respond(Self.merged)
            case .success(.deviceFull):
                logger.warning("device queue full, webhook refused", ["device.queue_max": String(deviceCap)])
                responder.respond(Self.deviceFull)
            case .success(.deviceGone):
                if case .limited(let seconds) = overFailedLimit { return responder.respond(Self.tooManyRequests(seconds)) }
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

    /// A body the relay cannot use, for a device that may not exist. The device is looked up first, as the Go relay
    /// does: a removed device's URL answers 410 whatever its template sends, so the person fixing the template is
    /// told the device is gone rather than sent to fix a body that could never arrive. Off the MHD thread (the
    /// lookup reads the disk); a client already past the failed-request limit gets the body's error without one,
    /// so a stream of bad bodies costs no reads.
    private func refuseBody(
        _ response: HTTPResponse, counted: Bool, deviceID: String, client: String, overFailedLimit: SlidingWindowLimiter.Decision,
        responder: any HTTPResponder
    ) {
        let refuse: @Sendable () -> Void = { counted ? fail(response, client: client, responder: responder) : responder.respond(response) }
        guard case .allowed = overFailedLimit else { return refuse() }
        DispatchQueue.global().async {
            let gone: Bool
            do {
                guard try store.device(id: deviceID) == nil else { return refuse() }
                gone = try store.tombstone(deviceID: deviceID) != nil
            } catch {
                // A store that cannot answer leaves the body's own error, which is true either way.
                return refuse()
            }
            fail(Self.unknownDevice(gone: gone), client: client, responder: responder)
        }
    }

    /// 410 for a device APNs reported gone (within TOMBSTONE_RETENTION), else 404.
    private func answerUnknownDevice(_ deviceID: String, client: String, responder: any HTTPResponder) {
        do {
            let gone = try store.tombstone(deviceID: deviceID) != nil
            fail(Self.unknownDevice(gone: gone), client: client, responder: responder)
        } catch {
            responder.respond(Self.queueUnavailable)
        }
    }

    static func unknownDevice(gone: Bool) -> HTTPResponse {
        gone ? .error(410, "device unregistered") : .error(404, "device not found")
    }

    private func fail(_ response: HTTPResponse, client: String, responder: any HTTPResponder) {
        failedLimiter.record(client, now: clock.nowMillis())
        responder.respond(response)
    }

    static func tooManyRequests(_ retryAfterSeconds: Int) -> HTTPResponse {
        .error(429, "too many requests", headers: [("Retry-After", String(retryAfterSeconds))])
    }

    static let queueUnavailable = HTTPResponse.error(503, "queue unavailable", headers: [("Retry-After", retryAfterSeconds)])

    /// The device holds DEVICE_QUEUE_MAX live jobs and none its alert could be folded into (a cap of one or two).
    static let deviceFull = HTTPResponse.error(503, "device queue full", headers: [("Retry-After", retryAfterSeconds)])
}
