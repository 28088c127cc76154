import Common

/// What to do with a job after one APNs answer (SPEC §4, reference/apns.md §1.4). One table, tested row by row.
public enum Verdict: Sendable, Equatable {
    /// 200: delete the job, record the device's success.
    case delivered
    /// 410: the token is gone — delete the device and its jobs, keep a tombstone.
    case removeDevice(reason: String)
    /// A permanent rejection of this push: dead-letter it with the reason, keep the device.
    case deadLetter(reason: String)
    /// A transient failure: retry with backoff. `outage` failures (5xx, transport) also feed the outage breaker.
    case retry(reason: String, outage: Bool)
    /// Not processed at all (REFUSED_STREAM, GOAWAY): send again at once, without spending an attempt.
    case resend
    /// The provider token is stale: new token, new connection, send again at once.
    case refreshProviderToken
    /// A configuration fault (key, team, topic): nothing will succeed until an operator acts. Stop delivering,
    /// keep every job, say so loudly.
    case pause(reason: String)

    /// The verdict for an HTTP answer with APNs' `reason` ("" when the body had none).
    public static func forResponse(status: Int, reason: String) -> Verdict {
        switch (status, reason) {
        case (200, _):
            return .delivered
        case (410, _):
            return .removeDevice(reason: reason.isEmpty ? "Unregistered" : reason)
        case (403, "ExpiredProviderToken"):
            return .refreshProviderToken
        case (403, _), (400, "BadTopic"), (400, "TopicDisallowed"), (400, "MissingTopic"):
            return .pause(reason: reason.isEmpty ? "Forbidden" : reason)
        case (400, "IdleTimeout"):
            return .resend
        case (429, "TooManyRequests"):
            return .retry(reason: reason, outage: false)
        case (429, _):
            // TooManyProviderTokenUpdates and anything new under 429: wait, don't hammer.
            return .retry(reason: reason.isEmpty ? "TooManyRequests" : reason, outage: true)
        case (500..., _):
            return .retry(reason: reason.isEmpty ? "HTTP \(status)" : reason, outage: true)
        case (400..<500, _):
            // BadDeviceToken, DeviceTokenNotForTopic, PayloadTooLarge, BadPath, …: this push will never succeed.
            // BadDeviceToken is also what a sandbox/production mix-up gives, so the device is kept.
            return .deadLetter(reason: reason.isEmpty ? "HTTP \(status)" : reason)
        default:
            return .retry(reason: "HTTP \(status)", outage: true)
        }
    }

    /// APNs' error body is `{"reason":"…"}` (plus `timestamp` on 410).
    public static func reason(fromBody body: [UInt8]) -> String { APNsErrorBody.reason(body) }
}
