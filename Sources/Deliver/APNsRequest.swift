import Common
import Foundation
import HTTP2
import Queue

/// Builds the APNs request for a claimed job (SPEC §3): the push is worded at send time, so a late one says so.
public struct APNsRequestFactory: Sendable {
    public let topic: String
    public let builder: PushBuilder
    /// The headers every push has, laid out once (only the provider token and the job's own follow, per push).
    let fixedHeaders: HTTP2HeaderBlock

    public init(topic: String, lateNotice: Duration) {
        self.topic = topic
        builder = PushBuilder(lateNotice: lateNotice)
        var fixed = HTTP2HeaderBlock()
        fixed.append("apns-push-type", "alert")
        fixed.append("apns-priority", "10")
        fixed.append("apns-topic", topic)
        fixed.append("content-type", "application/json")
        fixedHeaders = fixed
    }

    public struct InvalidPayload: Error {}

    /// The push for one job, worded now.
    public func push(for job: ClaimedJob, now: Int64) throws(InvalidPayload) -> PushMessage {
        guard let event = AlertEvent(jobPayload: job.payload) else { throw InvalidPayload() }
        var push = builder.notification(
            for: event, timeSensitiveDown: job.downNotificationLevel == .timeSensitive,
            acceptedAt: job.createdAt, now: now)
        push.badge = job.badge
        return push
    }

    /// One digest push for the head job and the pending jobs merged into it (oldest first), each followed by the
    /// alerts folded into it past `DEVICE_QUEUE_MAX`.
    public func digest(for job: ClaimedJob, merging pending: [PendingJob], now: Int64) throws(InvalidPayload) -> PushMessage {
        guard let head = AlertEvent(jobPayload: job.payload) else { throw InvalidPayload() }
        var events = [head] + job.folded.entries.map(\.event)
        var uncounted = job.folded.uncounted
        for waiting in pending {
            if let event = AlertEvent(jobPayload: waiting.payload) { events.append(event) }
            events += waiting.folded.entries.map(\.event)
            uncounted = uncounted + waiting.folded.uncounted
        }
        // The badge of its last alert: the count after everything the digest reports.
        return DigestBuilder(lateNotice: builder.lateNotice)
            .digest(
                events, uncounted: uncounted, timeSensitiveDown: job.downNotificationLevel == .timeSensitive,
                firstAcceptedAt: job.createdAt, now: now, badge: pending.last?.badge ?? job.badge)
    }

    /// `POST /3/device/<token>` with the headers APNs wants and the JSON payload (≤ 4096 bytes).
    /// - Parameters:
    ///   - providerToken: the current ES256 JWT.
    ///   - merged: the jobs a digest carries besides `job`: APNs keeps the push for an offline phone until the
    ///     latest of their expiries, so the newest alert in it is kept for its whole JOB_TTL.
    public func request(for job: ClaimedJob, push: PushMessage, providerToken: String, merged: [PendingJob] = []) -> HTTP2Request {
        let expiresAt = merged.reduce(job.expiresAt) { max($0, $1.expiresAt) }
        // Laid out here in one buffer: `:path` (never indexed), the fixed headers, then the push's own, each header's
        // HPACK treatment decided as it is written (no set of names to look up).
        var headers = HTTP2HeaderBlock(
            path: job.deviceToken, prefix: "/3/device/", reservingCapacity: fixedHeaders.byteCount + 384 + providerToken.utf8.count)
        headers.append(contentsOf: fixedHeaders)
        // Never indexed, as Apple asks (nghttp2 would not index it anyway).
        headers.append("authorization", providerToken, prefix: "bearer ", indexing: .never)
        // Until when APNs should keep trying an offline phone (seconds): acceptance + JOB_TTL (a digest's newest).
        // Unique per request, like the ids below: indexed with a connection's first request only, so later ones name
        // it by index and their values do not fill APNs' small HPACK table, as Apple advises (`:path` never is
        // indexed).
        headers.append("apns-expiration", decimal: Int(expiresAt / 1000), indexing: .uniqueValue)
        // Fixed per job across retries, so APNs and the phone see one notification, not several.
        headers.append("apns-id", job.publicID, indexing: .uniqueValue)
        headers.append("apns-collapse-id", job.publicID, indexing: .uniqueValue)
        return HTTP2Request(head: headers, body: APNsPayload.encode(push))
    }
}
