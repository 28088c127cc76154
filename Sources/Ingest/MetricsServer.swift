import Common
import Dispatch

/// The Prometheus listener on `METRICS_ADDR` (never the public port): `GET /metrics` in text format 0.0.4, and
/// the probes the process adds (on deliver and serve: `/livez` and `/readyz` for delivery, SPEC §2.3).
public enum MetricsServer {
    /// A probe's answer; it may block (a database ping), so it runs off the HTTP thread.
    public typealias Probe = @Sendable () -> HTTPResponse

    public static func start(on address: ListenAddress, metrics: MetricsRegistry, probes: [String: Probe] = [:]) throws -> HTTPServer {
        var configuration = HTTPServer.Configuration(host: address.host, port: address.port)
        configuration.threads = 1
        let blockingWork = DispatchQueue(label: "metrics.probes", attributes: .concurrent)
        return try HTTPServer(configuration) { request, responder in
            if let probe = probes[request.path], request.method == "GET" {
                return blockingWork.async { responder.respond(probe()) }
            }
            guard request.path == "/metrics" else { return responder.respond(.error(404, "not found")) }
            responder.respond(
                HTTPResponse(
                    status: 200, headers: [("Content-Type", "text/plain; version=0.0.4")],
                    body: metrics.expositionBytes()))
        }
    }
}
