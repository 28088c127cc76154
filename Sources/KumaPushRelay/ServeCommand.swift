import Common
import Ingest
import Queue

enum ServeCommand: Command {
    static let name = "serve"
    static let summary = "ingest and deliver in one process (the single-host default)"
    static let help = """
        Usage: kumapush-relay serve [--port N] [--database-path PATH] [...any setting flag]

        The HTTP API and the APNs workers in one process, sharing one database connection pool; each committed
        webhook wakes the workers directly. Needs the APNs settings of `deliver`. SIGTERM/SIGINT: stop accepting,
        answer requests in flight, wait for pushes in flight (SHUTDOWN_GRACE), exit 0.
        """

    static func run(settings: Settings, arguments: [String]) throws -> Int32 {
        try OptionParser(arguments).finish()
        try FileDescriptorBudget.ensure(settings)
        TerminationSignals.block()
        let logger = Logger(label: "relay", settings: settings)
        let lifecycle = ProcessLifecycle(logger: logger)
        let listening = try ProcessLifecycle.takeListeningSocket()
        try refuseMetricsOnTheAPIPort(settings, apiSocketFromSystemd: listening != nil)
        let store = try openStore(settings, logger: logger)
        let metrics = MetricsRegistry()
        let delivery = try DeliveryRuntime(settings: settings, store: store, logger: logger.child(label: "deliver"), metrics: metrics)
        var withoutMetrics = settings
        withoutMetrics.metricsAddress = nil
        let ingest = IngestService(
            settings: withoutMetrics, store: store, logger: logger.child(label: "ingest"), metrics: metrics,
            onCommit: { delivery.engine.wake() }, otherLoops: [delivery.loop], livenessLimit: lifecycle.livenessLimit)
        do {
            try ingest.start(listeningSocket: listening)
        } catch {
            throw StartupError(description: "cannot start ingest: \(error) (PORT/HOST)", exitCode: ExitCode.runtimeError)
        }
        let metricsServer = try startMetrics(
            settings, metrics,
            probes: delivery.probes(store: store, loops: ingest.monitoredLoops, livenessLimit: lifecycle.livenessLimit))
        delivery.start()
        logger.info(
            "relay listening",
            [
                "http.port": String(ingest.port), "socket": listening == nil ? "bound" : "from systemd",
                "base_path": settings.basePath,
                "metrics": settings.metricsAddress?.description ?? "off", "database": settings.databaseLabel
            ])
        lifecycle.ready(
            loops: ingest.monitoredLoops + [ProcessLifecycle.httpLoop(ingest, quietAfter: lifecycle.livenessLimit / 2)],
            status: "listening on port \(ingest.port)")
        let signal = TerminationSignals.wait()
        logger.info("shutting down", ["signal": signal])
        // The API's grace, then the deliverer's for pushes still in flight.
        lifecycle.stopping(expected: settings.shutdownDelay + settings.shutdownGrace * 2)
        ShutdownDelay.keepAccepting(ingest, for: settings.shutdownDelay, logger: logger)
        ingest.shutdown(grace: settings.shutdownGrace)
        delivery.shutdown(grace: settings.shutdownGrace)
        metricsServer?.stop()
        logger.info("stopped")
        return ExitCode.ok
    }
}
