import Common
import Dispatch
import Foundation
import Queue
import Synchronization
import Threading

/// The HTTP API of SPEC §2 on one listener, plus Prometheus metrics on another.
public final class IngestService: Sendable {
    let settings: Settings
    let store: any RelayStore
    let clock: any WallClock
    let logger: Logger
    public let metrics: MetricsRegistry
    let writer: QueueWriter
    let deviceAPI: DeviceAPI
    let webhook: WebhookEndpoint
    let resolver: ClientAddressResolver
    /// The process's other loops `/livez` watches besides the queue writer (in `serve`, the delivery loop).
    let otherLoops: [MonitoredLoop]
    /// How long a loop may go without a turn before `/livez` calls it wedged.
    let livenessLimit: Duration
    /// Set at the start of `shutdown`: `/readyz` answers 503 `shutting down` from then on (SPEC §2.3).
    let shuttingDown = Atomic<Bool>(false)
    /// Device calls and health checks touch the disk; they run here, never on an MHD thread.
    let blockingWork = DispatchQueue(label: "ingest.blocking", qos: .userInitiated, attributes: .concurrent)
    private let servers = Mutex<(api: HTTPServer?, metrics: HTTPServer?)>((nil, nil))

    /// - Parameters:
    ///   - onCommit: called after each group commit (in `serve`, wakes the deliverer at once).
    ///   - otherLoops: the process's other loops, for `/livez` (in `serve`, the delivery loop). Delivery never
    ///     touches readiness: a stalled or paused deliverer leaves webhooks to be stored (SPEC §2.3).
    ///   - livenessLimit: how long a loop may go without a turn before `/livez` calls it wedged.
    public init(
        settings: Settings, store: any RelayStore, clock: any WallClock = SystemClock(), logger: Logger,
        metrics: MetricsRegistry = MetricsRegistry(), onCommit: @escaping @Sendable () -> Void = {},
        otherLoops: [MonitoredLoop] = [], livenessLimit: Duration = HealthAnswers.defaultLivenessLimit
    ) {
        self.otherLoops = otherLoops
        self.livenessLimit = livenessLimit
        self.settings = settings
        self.store = store
        self.clock = clock
        self.logger = logger
        self.metrics = metrics
        writer = QueueWriter(
            store: store, clock: clock, ttl: settings.jobTTL, queueMax: settings.queueMax,
            deviceCap: settings.deviceQueueMax, logger: logger, metrics: metrics, onCommit: onCommit)
        deviceAPI = DeviceAPI(
            store: store, clock: clock, registerLimiter: SlidingWindowLimiter(rules: settings.rateLimitRegister),
            logger: logger)
        webhook = WebhookEndpoint(
            store: store, writer: writer, clock: clock, queueMax: settings.queueMax, deviceCap: settings.deviceQueueMax,
            testWait: settings.testWait,
            failedLimiter: SlidingWindowLimiter(rules: settings.rateLimitWebhookFailed),
            webhookLimiter: SlidingWindowLimiter(rules: settings.rateLimitWebhook),
            clientLimiter: SlidingWindowLimiter(rules: settings.rateLimitWebhookIP),
            testWaiter: TestOutcomeWaiter(store: store, clock: clock), logger: logger)
        resolver = ClientAddressResolver(settings: settings)
        Self.describeMetrics(metrics, store: store, clock: clock)
    }

    /// Starts listening. Throws when a listener cannot bind.
    /// - Parameter listeningSocket: a socket handed over by systemd (socket activation), accepted on instead of
    ///   binding HOST:PORT.
    public func start(apiConfiguration: HTTPServer.Configuration? = nil, listeningSocket: Int32? = nil) throws {
        var configuration = apiConfiguration ?? HTTPServer.Configuration(host: settings.host, port: settings.port)
        if let listeningSocket { configuration.listeningSocket = listeningSocket }
        configuration.connectionLimit = settings.httpMaxConnections
        configuration.connectionTimeout = max(1, Int(settings.httpIdleTimeout.wholeMilliseconds / 1000))
        configuration.connectionMemoryLimit = settings.httpMaxHeaderBytes
        configuration.requestTimeout = settings.httpRequestTimeout
        configuration.connectionsPerClient = settings.httpMaxConnectionsPerIP
        // Behind a reverse proxy every client arrives from the proxy's address: capping it would cap everyone.
        if settings.behindProxy { configuration.uncappedPeer = { [resolver] in resolver.isTrusted($0) } }
        configuration.onLibraryMessage = { [logger, settings] in Self.log($0, logger: logger, settings: settings) }
        let api = try HTTPServer(configuration) { [self] request, responder in handle(request, responder: responder) }
        let metricsServer = try settings.metricsAddress.map { try MetricsServer.start(on: $0, metrics: metrics) }
        servers.withLock { $0 = (api, metricsServer) }
        metrics.describe(
            "kumapush_http_connections_cut_total", .counter,
            "Connections closed because a request did not arrive within HTTP_REQUEST_TIMEOUT.")
        metrics.describe(
            "kumapush_http_connections_refused_total", .counter,
            "Connections refused because their client had HTTP_MAX_CONNECTIONS_PER_IP open.")
        metrics.describe(
            "kumapush_http_connections_open", .gauge,
            "Open connections to the API listener; at HTTP_MAX_CONNECTIONS new ones wait in the listen backlog.")
        metrics.describe(
            "kumapush_http_refused_total", .counter,
            "Requests the HTTP library answered with an error before the relay read them, by status "
                + "(414: URL over HTTP_MAX_HEADER_BYTES; 431: headers over it; 400: malformed).")
        metrics.collect { [weak api] in
            guard let api else { return [] }
            return [
                (name: "kumapush_http_connections_cut_total", labels: [], value: Double(api.connectionsCut)),
                (name: "kumapush_http_connections_refused_total", labels: [], value: Double(api.connectionsRefused)),
                (name: "kumapush_http_connections_open", labels: [], value: Double(api.openConnections))
            ]
                + api.requestsRefused.sorted { $0.key < $1.key }.map {
                    (name: "kumapush_http_refused_total", labels: [("status", String($0.key))], value: Double($0.value))
                }
        }
    }

    /// libmicrohttpd's refusals get a warning each, as answered requests get their request line: a GET webhook
    /// refused for its URL's length is a lost alert, and this is the relay's only sight of it. Its other messages
    /// are kept for debugging, by their format only (a formatted one may hold a URL).
    static func log(_ message: LibraryMessage, logger: Logger, settings: Settings) {
        switch message {
        case .refusedRequest(let status):
            let reason =
                switch status {
                case 414: "URL longer than HTTP_MAX_HEADER_BYTES allows"
                case 431: "request headers larger than HTTP_MAX_HEADER_BYTES allows"
                case 400: "malformed request"
                default: "refused by the HTTP library"
                }
            logger.warning(
                "request refused before it was read",
                ["http.status": String(status), "reason": reason, "http.max_header_bytes": String(settings.httpMaxHeaderBytes)])
        case .other(let format):
            logger.debug("HTTP library message", ["message": format])
        }
    }

    /// The API port (useful after binding port 0).
    public var port: UInt16 { servers.withLock { $0.api?.port ?? 0 } }
    /// Time since a request last arrived on the API listener.
    public var apiSilence: Duration { servers.withLock { $0.api?.silence } ?? .zero }
    /// `/livez` below BASE_PATH.
    public var livenessPath: String { settings.basePath + "/livez" }
    /// Where a request to this process's own API listener goes (loopback for a wildcard address), for probes.
    public var probeHost: String {
        guard let address = servers.withLock({ $0.api?.listenAddress }) else { return "127.0.0.1" }
        if address.bytes.allSatisfy({ $0 == 0 }) { return address.isIPv4 ? "127.0.0.1" : "::1" }
        return address.description
    }
    public var metricsPort: UInt16? { servers.withLock { $0.metrics?.port } }

    /// SIGTERM: stop accepting, answer what is in flight (at most `grace`), commit what is queued, close.
    /// `/readyz` answers 503 `shutting down` from now on, while everything else goes on (`SHUTDOWN_DELAY`).
    public func announceShutdown() {
        shuttingDown.store(true, ordering: .relaxed)
    }

    public func shutdown(grace: Duration) {
        shuttingDown.store(true, ordering: .relaxed)
        let (api, metricsServer) = servers.withLock { $0 }
        let drained = api?.drain(grace: grace) ?? true
        if !drained { logger.warning("requests still in flight at the end of the grace period") }
        writer.stop()
        api?.stop()
        metricsServer?.stop()
    }

    func handle(_ request: HTTPRequest, responder: any HTTPResponder) {
        guard let route = Route.match(request.path, basePath: settings.basePath) else {
            return respond(.error(404, "not found"), route: "unmatched", request, responder)
        }
        guard route.allowedMethods.contains(request.method) else {
            return respond(
                .error(405, "method not allowed", headers: [("Allow", route.allowedMethods.joined(separator: ", "))]),
                route: route.pattern, request, responder)
        }
        let client = resolver.client(for: request)
        let instrumented = InstrumentedResponder(
            inner: responder, route: route.pattern, method: MethodLabel.of(request.method),
            client: client.address,
            started: .now, logger: logger, metrics: metrics, logRequest: !route.isProbe)
        switch route {
        case .health, .readyz:
            blockingWork.async { [self] in instrumented.respond(readiness()) }
        case .livez:
            instrumented.respond(HealthAnswers.liveness(wedged: MonitoredLoop.wedged(monitoredLoops, limit: livenessLimit)))
        case .register:
            blockingWork.async { [deviceAPI] in instrumented.respond(deviceAPI.register(request, client: client.limitKey)) }
        case .device(let id):
            blockingWork.async { [deviceAPI] in
                switch request.method {
                case "GET": instrumented.respond(deviceAPI.get(request, id: id))
                case "PATCH": instrumented.respond(deviceAPI.update(request, id: id))
                default: instrumented.respond(deviceAPI.delete(request, id: id))
                }
            }
        case .webhook(let deviceID):
            webhook.handle(request, deviceID: deviceID, client: client.limitKey, responder: instrumented)
        }
    }

    private func respond(_ response: HTTPResponse, route: String, _ request: HTTPRequest, _ responder: any HTTPResponder) {
        InstrumentedResponder(
            inner: responder, route: route, method: MethodLabel.of(request.method),
            client: resolver.clientAddress(for: request),
            started: .now, logger: logger, metrics: metrics, logRequest: true
        ).respond(response)
    }

    static func describeMetrics(_ metrics: MetricsRegistry, store: any RelayStore, clock: any WallClock) {
        metrics.describe("kumapush_http_requests_total", .counter, "HTTP requests answered, by route pattern, method and status.")
        // The webhook refusals alerts watch, exported from the start at zero: a series that first appears at its first
        // 503 is a rise `increase()` cannot see, and each of those 503s is an alert Uptime Kuma will not resend.
        let webhook = Route.webhook(deviceID: "")
        for method in webhook.allowedMethods {
            for status in ["503", "429"] {
                _ = metrics.counter("kumapush_http_requests_total", [("route", webhook.pattern), ("method", method), ("status", status)])
            }
        }
        metrics.describe(
            "kumapush_http_request_duration_seconds", .histogram, "Time from request received to answer.",
            buckets: latencyBuckets)
        QueueMetrics.describe(metrics, store: store, clock: clock)
    }
}
