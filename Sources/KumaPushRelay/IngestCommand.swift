import Common
import Ingest
import Queue

enum IngestCommand: Command {
    static let name = "ingest"
    static let summary = "the HTTP API only (no APNs key needed)"
    static let help = """
        Usage: kumapush-relay ingest [--port N] [--host ADDR] [--database-path PATH] [...any setting flag]

        Serves the device API and webhooks on HOST:PORT and commits push jobs to the database for `deliver`
        processes. Prometheus metrics on METRICS_ADDR. SIGTERM/SIGINT: stop accepting, answer requests in
        flight (up to SHUTDOWN_GRACE), exit 0.
        """

    static func run(settings: Settings, arguments: [String]) throws -> Int32 {
        try OptionParser(arguments).finish()
        try FileDescriptorBudget.ensure(settings)
        TerminationSignals.block()
        let logger = Logger(label: "ingest", settings: settings)
        let lifecycle = ProcessLifecycle(logger: logger)
        let listening = try ProcessLifecycle.takeListeningSocket()
        try refuseMetricsOnTheAPIPort(settings, apiSocketFromSystemd: listening != nil)
        // Its WAL checkpoints wait for a core the HTTP threads and the queue writer leave idle (WALCheckpointer).
        let store = try openStore(settings, logger: logger, checkpointsYield: true)
        let service = IngestService(settings: settings, store: store, logger: logger, livenessLimit: lifecycle.livenessLimit)
        do {
            try service.start(listeningSocket: listening)
        } catch {
            throw StartupError(description: "cannot start ingest: \(error) (PORT/HOST or METRICS_ADDR)", exitCode: ExitCode.runtimeError)
        }
        logger.info(
            "ingest listening",
            [
                "http.port": String(service.port), "socket": listening == nil ? "bound" : "from systemd",
                "base_path": settings.basePath,
                "metrics": settings.metricsAddress?.description ?? "off",
                "database": settings.databaseLabel
            ])
        lifecycle.ready(
            loops: service.monitoredLoops + [ProcessLifecycle.httpLoop(service, quietAfter: lifecycle.livenessLimit / 2)],
            status: "listening on port \(service.port)")
        let signal = TerminationSignals.wait()
        logger.info("shutting down", ["signal": signal])
        lifecycle.stopping(expected: settings.shutdownDelay + settings.shutdownGrace)
        ShutdownDelay.keepAccepting(service, for: settings.shutdownDelay, logger: logger)
        service.shutdown(grace: settings.shutdownGrace)
        logger.info("stopped")
        return ExitCode.ok
    }
}
