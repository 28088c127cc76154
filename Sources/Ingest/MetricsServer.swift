import Common

/// The Prometheus listener on `METRICS_ADDR` (never the public port): `GET /metrics` in text format 0.0.4.
public enum MetricsServer {
    public static func start(on address: ListenAddress, metrics: MetricsRegistry) throws -> HTTPServer {
        var configuration = HTTPServer.Configuration(host: address.host, port: address.port)
        configuration.threads = 1
        return try HTTPServer(configuration) { request, responder in
            guard request.path == "/metrics" else { return responder.respond(.error(404, "not found")) }
            responder.respond(
                HTTPResponse(
                    status: 200, headers: [("Content-Type", "text/plain; version=0.0.4")],
                    body: Array(metrics.exposition().utf8)))
        }
    }
}
