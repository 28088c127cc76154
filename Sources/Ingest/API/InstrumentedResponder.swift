import Common
import Foundation

/// Wraps a responder to log one line and record metrics per request: route pattern, method, status, latency.
/// Never the path (it holds the device id), the body or any header. Every label comes from a fixed set: the route
/// pattern (or `unmatched`), `MethodLabel`, and a status the relay chose.
struct InstrumentedResponder: HTTPResponder {
    let inner: any HTTPResponder
    let route: String
    let method: String
    let client: String
    let started: ContinuousClock.Instant
    let logger: Logger
    let metrics: MetricsRegistry
    let logRequest: Bool

    func respond(_ response: HTTPResponse) {
        inner.respond(response)
        let seconds = (ContinuousClock.now - started).seconds
        metrics.increment("kumapush_http_requests_total", [("route", route), ("method", method), ("status", String(response.status))])
        metrics.observe("kumapush_http_request_duration_seconds", [("route", route)], value: seconds)
        if logRequest, logger.isEnabled(.info) {
            logger.info(
                "request",
                [
                    "http.method": method, "http.route": route, "http.status": String(response.status),
                    "latency_ms": String(Double(Int(seconds * 100_000)) / 100), "client.ip": client
                ])
        }
    }
}
