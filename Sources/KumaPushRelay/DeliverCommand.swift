import Common
import Ingest
import Queue

enum DeliverCommand: Command {
    static let name = "deliver"
    static let summary = "the APNs worker pool only"
    static let help = """
        Usage: kumapush-relay deliver [--database-path PATH] [...any setting flag]

        Claims push jobs from the database and sends them to APNs over APNS_CONNECTIONS persistent HTTP/2
        connections, at most DELIVER_CONCURRENCY in flight. Needs APNS_AUTH_KEY_PATH, APNS_KEY_ID, APNS_TEAM_ID and
        APP_BUNDLE_IDENTIFIER. Several deliver processes may share one database. SIGTERM/SIGINT: stop claiming,
        wait for pushes in flight (up to SHUTDOWN_GRACE), release the rest, exit 0.
        """

    static func run(settings: Settings, arguments: [String]) throws -> Int32 {
        try OptionParser(arguments).finish()
        TerminationSignals.block()
        let logger = Logger(label: "deliver", settings: settings)
        let lifecycle = ProcessLifecycle(logger: logger)
        let store = try openStore(settings, logger: logger)
        let metrics = MetricsRegistry()
        let runtime = try DeliveryRuntime(settings: settings, store: store, logger: logger, metrics: metrics)
        let metricsServer = try startMetrics(
            settings, metrics, probes: runtime.probes(store: store, loops: [runtime.loop], livenessLimit: lifecycle.livenessLimit))
        runtime.start()
        lifecycle.ready(loops: [runtime.loop], status: "delivering")
        let signal = TerminationSignals.wait()
        logger.info("shutting down", ["signal": signal])
        lifecycle.stopping(expected: settings.shutdownGrace)
        runtime.shutdown(grace: settings.shutdownGrace)
        metricsServer?.stop()
        logger.info("stopped")
        return ExitCode.ok
    }
}

/// Starts the Prometheus listener unless METRICS_ADDR is off.
func startMetrics(_ settings: Settings, _ metrics: MetricsRegistry, probes: [String: MetricsServer.Probe]) throws -> HTTPServer? {
    guard let address = settings.metricsAddress else { return nil }
    do {
        return try MetricsServer.start(on: address, metrics: metrics, probes: probes)
    } catch {
        throw StartupError(description: "cannot listen on METRICS_ADDR \(address): \(error)", exitCode: ExitCode.runtimeError)
    }
}
