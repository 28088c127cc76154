import Common

/// The API's and the metrics' listeners both bind with `SO_REUSEPORT` (libmicrohttpd's `LISTENING_ADDRESS_REUSE`, which
/// lets a restarted ingest take over its port), so METRICS_ADDR on PORT's own port was accepted: the kernel then split
/// the connections between the two, and part of the webhooks and device calls were answered 404 by the metrics
/// listener. `ingest` and `serve` refuse it at start-up (exit 2) when the addresses can meet: the same host, or either
/// one a wildcard. A socket from systemd is its own address, whatever PORT says.
func refuseMetricsOnTheAPIPort(_ settings: Settings, apiSocketFromSystemd: Bool) throws(ConfigurationError) {
    guard !apiSocketFromSystemd, let metrics = settings.metricsAddress, metrics.port == settings.port else { return }
    let wildcards: Set<String> = ["0.0.0.0", "::"]
    guard metrics.host == settings.host || wildcards.contains(metrics.host) || wildcards.contains(settings.host) else { return }
    throw ConfigurationError(
        variable: "METRICS_ADDR",
        message: "\(metrics) uses PORT \(settings.port) on the same address: the metrics listener would answer part of the API's requests")
}
