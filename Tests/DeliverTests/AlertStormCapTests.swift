import Common
import Foundation
import Queue
import Testing

/// The deliverer's digest near DEVICE_QUEUE_MAX (`DigestCarry`), through the engine as `deliver` builds it: the
/// cap reaches the store's backlog read from the settings, and the digest leaves the newest waiting job out for
/// ingest to fold into.
@Suite struct AlertStormCapTests {
    static func alert(_ device: String, _ monitor: Int) -> NewJob {
        let event = AlertEvent(kind: .monitor, status: .down, monitorID: monitor, monitorName: "M\(monitor)", message: "down")
        return NewJob(deviceID: device, publicID: UUID().uuidString.lowercased(), payload: event.jobPayload)
    }

    /// A device over its burst holding DEVICE_QUEUE_MAX (1,000, as shipped) live jobs: its digest carries the 998
    /// behind the head, not the newest, which goes out in the next push.
    @Test(arguments: [false, true]) func atTheCapTheDigestLeavesTheNewestWaitingJobForTheNextPush(onPostgres: Bool) throws {
        let h = try DeliveryHarness(deviceBurst: 1, onPostgres: onPostgres)
        defer { h.stop() }
        let device = try h.device(1)
        try h.enqueue(device.id, ["first"])
        #expect(h.waitUntil { (try? h.store.liveJobCount()) == 0 }, "the first push counts towards the burst")
        let cap = Settings().deviceQueueMax
        _ = try h.store.enqueue((1...cap).map { Self.alert(device.id, $0) }, now: h.clock.nowMillis(), ttl: .seconds(3600))
        h.clock.advance(.seconds(6))  // past the digest window of the first push
        h.engine.wake()
        let sent = { h.simulator.received.filter { $0.token == device.token && $0.status == 200 }.count }
        #expect(h.waitUntil { sent() == 2 && (try? h.store.liveJobCount()) ?? 0 < cap }, "the digest went and settled")
        #expect(h.metrics.value("kumapush_digests_total") == 1)
        #expect(try h.store.liveJobCount() == 1, "the newest job left out, waiting for the next digest window")
        h.clock.advance(.seconds(6))
        h.engine.wake()
        #expect(h.waitUntil { (try? h.store.liveJobCount()) == 0 })
        let last = try #require(h.simulator.received.last { $0.token == device.token && $0.status == 200 })
        let title = try #require((try JSONParser.parse(last.payload))["aps"]?["alert"]?["title"]?.stringValue)
        #expect(title == "M\(cap) is down")
        #expect(sent() == 3)
    }
}
