import Common
import Deliver
import HTTP2
import Testing

@testable import Queue

/// The request the deliverer sends for a job, as laid out for nghttp2 (the simulator checks what arrives; this checks
/// what the wire cannot show: which headers enter the HPACK dynamic table only once per connection).
@Suite struct APNsRequestTests {
    @Test func uniquePerRequestHeadersEnterTheHPACKTableOncePerConnectionAndTheRestAreIndexed() {
        let factory = APNsRequestFactory(topic: "app.example", lateNotice: .seconds(60))
        let job = ClaimedJob(
            id: 7, publicID: "0f1e2d3c-aaaa-bbbb-cccc-000000000001", deviceID: "d", deviceToken: "ab" + String(repeating: "0", count: 62),
            downNotificationLevel: .normal, payload: [], attempt: 1, createdAt: 1_000_000, expiresAt: 4_600_000)
        let push = PushMessage(title: "t", body: "b", interruptionLevel: .active)
        let request = factory.request(for: job, push: push, providerToken: "eyJ.jwt")
        #expect(request.method == "POST" && request.path == "/3/device/ab" + String(repeating: "0", count: 62))
        let fields = request.headers.fields
        #expect(
            fields.map { "\($0.name): \($0.value)" } == [
                "apns-push-type: alert", "apns-priority: 10", "apns-topic: app.example", "content-type: application/json",
                "authorization: bearer eyJ.jwt", "apns-expiration: 4600", "apns-id: 0f1e2d3c-aaaa-bbbb-cccc-000000000001",
                "apns-collapse-id: 0f1e2d3c-aaaa-bbbb-cccc-000000000001"
            ])
        // Unique to each push: never in the HPACK table but for the names, once per connection (Apple's advice).
        #expect(fields.filter { $0.indexing == .uniqueValue }.map(\.name) == ["apns-expiration", "apns-id", "apns-collapse-id"])
        #expect(request.body == APNsPayload.encode(push))
    }
}
