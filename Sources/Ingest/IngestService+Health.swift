import Queue
import Threading

/// `/readyz` (and its alias `/health`) and `/livez` on ingest's port (SPEC §2.3).
extension IngestService {
    /// Every loop this process's `/livez` watches: the queue writer's threads, then `otherLoops`.
    public var monitoredLoops: [MonitoredLoop] {
        [MonitoredLoop(name: "queue writer") { [writer] in writer.longestSilence }] + otherLoops
    }

    /// 200 when a webhook would be stored now. Blocks on the database: call it off the HTTP threads.
    func readiness() -> HTTPResponse {
        if shuttingDown.load(ordering: .relaxed) { return HealthAnswers.shuttingDown }
        do {
            try store.ping()
            return HealthAnswers.ok
        } catch {
            return HealthAnswers.databaseUnavailable
        }
    }
}

/// The JSON answers of the health endpoints, shared by ingest's port and the metrics listener.
public enum HealthAnswers {
    public static let ok = HTTPResponse.json(200, "{\"status\":\"ok\"}")
    public static let databaseUnavailable = HTTPResponse.error(503, "database unavailable")
    public static let shuttingDown = HTTPResponse.error(503, "shutting down", headers: [("Retry-After", "5")])

    /// A loop silent this long is wedged, not idle (every loop turns at least once a second) when systemd's
    /// watchdog does not say otherwise: long enough for a database call that waits out its locks
    /// (PostgreSQL's lock and idle timeouts are seconds), short enough that a balancer notices within a minute.
    public static let defaultLivenessLimit: Duration = .seconds(60)

    /// `/livez`: 200 unless a loop is wedged; then 503 naming the loops (a restart helps).
    public static func liveness(wedged: [String]) -> HTTPResponse {
        wedged.isEmpty ? ok : .error(503, "wedged: " + wedged.joined(separator: ", "))
    }
}
