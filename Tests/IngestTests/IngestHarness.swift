import Common
import Foundation
import Ingest
import Queue
import TestSupport
import Threading

/// An ingest service on port 0 over a fresh database, with a client pointed at it.
final class IngestHarness {
    let directory = TemporaryDirectory()
    let store: SQLiteStore
    let service: IngestService
    let client: RawHTTPClient

    /// Every log line the service wrote, as text.
    let logLines = LogCapture()

    init(
        _ environment: [String: String] = [:], clock: any WallClock = SystemClock(),
        wrap: (SQLiteStore) -> any RelayStore = { $0 }, otherLoops: [MonitoredLoop] = []
    ) throws {
        var environment = environment
        environment["METRICS_ADDR"] = environment["METRICS_ADDR"] ?? "off"
        let (settings, _) = try Settings.load(environment: environment, arguments: [])
        store = try SQLiteStore(path: directory.path("relay.db"), now: SystemClock().nowMillis())
        let logger = Logger(label: "test", level: .debug, sink: LogSink(format: .text) { [logLines] line in logLines.append(line) })
        service = IngestService(
            settings: settings, store: wrap(store), clock: clock, logger: logger, otherLoops: otherLoops,
            livenessLimit: .seconds(5))
        var configuration = HTTPServer.Configuration(host: "127.0.0.1", port: 0)
        configuration.threads = 2
        try service.start(apiConfiguration: configuration)
        client = RawHTTPClient(port: service.port)
    }

    deinit { service.shutdown(grace: .seconds(5)) }

    /// A clock that stands still in the middle of a minute: rate-limit windows (whole minutes since 1970, weighted
    /// across their boundary) then count exactly, however long a loaded machine takes between two requests.
    struct StoppedClock: WallClock {
        let millis = SystemClock().nowMillis() / 60_000 * 60_000 + 30_000
        func nowMillis() -> Int64 { millis }
    }

    static let token = String(repeating: "ab", count: 32)

    /// Registers a device through the API; returns (id, auth token).
    func register(token: String = IngestHarness.token) throws -> (id: String, auth: String) {
        let response = try client.send(
            "POST", "/devices", headers: [("Content-Type", "application/json")],
            body: Array("{\"device_token\":\"\(token)\"}".utf8))
        guard let json = response.json, let id = json["id"] as? String, let auth = json["auth_token"] as? String else {
            throw RawHTTPClient.Failure.malformed(response.text)
        }
        return (id, auth)
    }

    func webhook(_ id: String, _ body: String, type: String = "application/json") throws -> RawHTTPClient.Response {
        try client.send("POST", "/wh/\(id)", headers: [("Content-Type", type)], body: Array(body.utf8))
    }

    /// The stored jobs' events, in acceptance order.
    func jobEvents() throws -> [AlertEvent?] {
        try RawSQLite(path: directory.path("relay.db")).query("SELECT payload FROM jobs ORDER BY id")
            .map { AlertEvent(jobPayload: Array($0[0].utf8)) }
    }

    func jobIDs() throws -> Set<String> {
        Set(try RawSQLite(path: directory.path("relay.db")).query("SELECT public_id FROM jobs").map { $0[0] })
    }
}
