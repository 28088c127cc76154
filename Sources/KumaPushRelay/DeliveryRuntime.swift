import Common
import Deliver
import Foundation
import HTTP2
import Queue
import Synchronization

/// Everything a delivering process runs (deliver and serve): provider tokens, the APNs connection pool and the
/// engine. Configuration faults (key, CA file, URL) surface here as exit 2 naming the variable.
final class DeliveryRuntime: Sendable {
    let engine: DeliveryEngine
    let pool: APNsConnectionPool

    init(settings: Settings, store: any RelayStore, logger: Logger, metrics: MetricsRegistry) throws {
        let clock = SystemClock()
        let tokens = try ProviderTokenSource.load(settings: settings, clock: clock, logger: logger)
        let tls: TLSContext
        do {
            tls = try TLSContext.client(extraCAFile: settings.apnsCAFile)
        } catch {
            throw ConfigurationError(variable: "APNS_CA_FILE", message: "\(error)")
        }
        guard let endpoint = APNsEndpoint(settings.apnsBaseURL) else {
            throw ConfigurationError(variable: "APNS_URL", message: "cannot use \(settings.apnsBaseURL)")
        }
        var connection = HTTP2ClientConnection.Configuration(host: endpoint.host, port: endpoint.port)
        connection.requestTimeout = settings.apnsRequestTimeout
        // The pool needs to wake the engine, and the engine needs the pool: a late-bound reference breaks the knot.
        let waker = Waker()
        pool = APNsConnectionPool(configuration: connection, connections: settings.apnsConnections, tls: tls,
                                  logger: logger.child(label: "apns"), onChange: { waker.wake() })
        let worker = "\(ProcessInfo.processInfo.hostName)-\(getpid())-\(Base64URL.encode((try? Crypto.randomBytes(4)) ?? [0]))"
        engine = DeliveryEngine(configuration: .init(settings: settings, worker: worker), store: store, pool: pool, tokens: tokens,
                                factory: APNsRequestFactory(topic: settings.appBundleIdentifier ?? "", lateNotice: settings.lateNotice),
                                clock: clock, logger: logger, metrics: metrics)
        waker.target.withLock { $0 = engine }
        logger.info("delivering", ["apns.url": settings.apnsBaseURL, "apns.connections": String(settings.apnsConnections),
                                   "worker": worker])
    }

    func start() {
        pool.start()
        engine.start()
    }

    func shutdown(grace: Duration) {
        engine.shutdown(grace: grace)
        pool.shutdown()
    }
}

final class Waker: Sendable {
    let target = Mutex<DeliveryEngine?>(nil)
    func wake() { target.withLock { $0 }?.wake() }
}
