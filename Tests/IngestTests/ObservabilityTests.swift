import Common
import Foundation
import Ingest
import Queue
import Synchronization
import TestSupport
import Testing

@Suite struct ObservabilityTests {
    @Test func healthAnswers503WhenTheDatabaseDoesNotAnswer() throws {
        let h = try IngestHarness(wrap: { UnreachableDatabase(inner: $0) })
        let response = try h.client.send("GET", "/health")
        #expect(response.status == 503 && response.text == "{\"error\":\"database unavailable\"}")
    }

    @Test func metricsAreOnTheirOwnListenerNotThePublicPort() throws {
        let h = try IngestHarness(["METRICS_ADDR": "127.0.0.1:0"])
        _ = try h.register()
        #expect(try h.client.send("GET", "/metrics").status == 404)
        let port = try #require(h.service.metricsPort)
        let metrics = try RawHTTPClient(port: port).send("GET", "/metrics")
        #expect(metrics.status == 200 && metrics.headers["content-type"]?.hasPrefix("text/plain") == true)
        #expect(metrics.text.contains("kumapush_http_requests_total{route=\"/devices\",method=\"POST\",status=\"201\"} 1"))
        #expect(metrics.text.contains("kumapush_queue_jobs{state=\"available\"} 0"))
        #expect(metrics.text.contains("kumapush_devices 1"))
    }

    /// SPEC: never log notification content, device tokens in full, auth tokens or device ids.
    @Test func logsHoldNoDeviceIDTokenAuthTokenOrContent() throws {
        let h = try IngestHarness()
        let token = String(repeating: "9f", count: 32)
        let (id, auth) = try h.register(token: token)
        _ = try h.client.send("GET", "/devices/\(id)", headers: [("Authorization", "Bearer \(auth)")])
        _ = try h.webhook(id, Fixtures.text("g-multiline-emoji-ping-down.json"))
        _ = try h.webhook("NoSuchDevice12", Fixtures.text("a-1.23-http-down.json"))
        _ = try h.webhook(id, "{broken")
        let logs = h.logLines.text
        #expect(logs.contains("request"), "requests are logged at all")
        for secret in [id, token, auth, "NoSuchDevice12", "PING db.internal", "Shop API", "primary"] {
            #expect(!logs.contains(secret), "\(secret) must not be logged")
        }
    }
}

/// A store whose database does not answer `/health`'s query.
final class UnreachableDatabase: ForwardingStore, @unchecked Sendable {
    override func ping() throws(StoreError) { throw StoreError(.unavailable, "disk I/O error") }
}

/// Issue 13: methods are chosen by whoever connects; as labels they must come from a fixed set.
@Suite struct HostileLabelTests {
    @Test func randomMethodsAndPathsLeaveTheMetricsTheSameSize() throws {
        let h = try IngestHarness(["METRICS_ADDR": "127.0.0.1:0"])
        let metricsClient = RawHTTPClient(port: try #require(h.service.metricsPort))
        func hostileRound(_ count: Int) throws {
            for _ in 0..<count {
                let method = String((0..<40).map { _ in "ABCDEFGHIJKLMNOPQRSTUVWXYZ".randomElement()! })
                let path = ["/x\(Int.random(in: 0..<1_000_000))", "/devices/\(Int.random(in: 0..<1_000_000))", "/wh/"].randomElement()!
                _ = try h.client.send(method, path)
            }
        }
        // The series, not the bytes: values (counts, process CPU and memory, histogram buckets) grow by some digits,
        // more of them on a loaded machine (a 64-byte allowance failed twice under load).
        func series() throws -> Set<Substring> {
            let lines = try metricsClient.send("GET", "/metrics").text.split(separator: "\n").filter { !$0.hasPrefix("#") }
            return Set(lines.map { line in line[..<(line.lastIndex(of: " ") ?? line.endIndex)] })
        }
        try hostileRound(50)
        let before = try series()
        try hostileRound(500)
        let after = try series()
        let added = after.subtracting(before)
        #expect(added.count == 0, "only counts grew, no series (new: \(added.prefix(3)))")
        #expect(after.contains { $0.contains("method=\"other\"") })
        for line in h.logLines.text.split(separator: "\n") where line.contains("http.method=") {
            #expect(line.contains("http.method=other") || line.contains("http.method=GET") || line.contains("http.method=POST"))
        }
    }
}
