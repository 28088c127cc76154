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
    let other: OtherAPNsEnvironment?

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
        let connection = Self.connectionConfiguration(endpoint, settings: settings)
        // The pool needs to wake the engine, and the engine needs the pool: a late-bound reference breaks the knot.
        let waker = Waker()
        pool = APNsConnectionPool(
            configuration: connection, connections: settings.apnsConnections, tls: tls,
            logger: logger.child(label: "apns"), onChange: { waker.wake() })
        let other = try Self.otherEnvironment(settings: settings, tls: tls, logger: logger, waker: waker)
        let worker = WorkerIdentity.current.workerID()
        // On SQLite, a lock file beside the database says when a deliverer has ended, whatever its pid namespace.
        let locks = settings.databaseURL == nil ? DelivererLocks(databasePath: settings.databasePath) : nil
        do {
            try locks?.hold(worker: worker)
        } catch {
            logger.warning("no lock file for this deliverer: a successor in another pid namespace waits out its leases", ["error": error.description])
        }
        Self.takeBackLeasesOfGonePredecessors(store: store, locks: locks, worker: worker, clock: clock, logger: logger)
        self.other = other
        engine = DeliveryEngine(
            configuration: .init(settings: settings, worker: worker), store: store, pool: pool, other: other, tokens: tokens,
            factory: APNsRequestFactory(topic: settings.appBundleIdentifier ?? "", lateNotice: settings.lateNotice),
            clock: clock, logger: logger, metrics: metrics)
        waker.target.withLock { $0 = engine }
        logger.info(
            "delivering",
            [
                "apns.url": settings.apnsBaseURL, "apns.connections": String(settings.apnsConnections),
                "worker": worker
            ])
    }

    /// SPEC §4: a deliverer restarted on the same machine sends its crashed predecessor's in-flight pushes now, not
    /// after LEASE_TIMEOUT, also when it is PID 1 of a restarted container (`DelivererLocks`, SQLite only). Best
    /// effort: a failure here leaves them to the lease, as before.
    static func takeBackLeasesOfGonePredecessors(
        store: any RelayStore, locks: DelivererLocks?, worker: String, clock: some WallClock, logger: Logger
    ) {
        guard let holders = try? store.leaseHolders() else { return }
        var takenBack: Set<String> = []
        for holder in holders {
            // Its lock file, when it has one, is the truth; else the pid, on this node only.
            guard locks?.hasEnded(holder) ?? WorkerIdentity.current.isGonePredecessor(holder) else { continue }
            guard let count = try? store.takeBackLeases(of: holder, now: clock.nowMillis()) else { continue }
            takenBack.insert(holder)
            if count > 0 {
                logger.warning("took back the leases of a deliverer on this machine that is gone", ["worker": holder, "count": String(count)])
            }
        }
        // Every holder not taken back keeps its file, also one that ended since it was judged alive above: a later
        // start still knows that it ended.
        locks?.removeEnded(keeping: holders.filter { !takenBack.contains($0) }, own: worker)
    }

    func start() {
        pool.start()
        engine.start()
    }

    func shutdown(grace: Duration) {
        engine.shutdown(grace: grace)
        pool.shutdown()
        other?.shutdown()
    }

    /// Both environments' connections: one request timeout (the deliverer's lease check counts on it for every push
    /// it sends), and no response headers kept (the engine reads the status and APNs's reason, which is in the body).
    private static func connectionConfiguration(_ endpoint: APNsEndpoint, settings: Settings) -> HTTP2ClientConnection.Configuration {
        var connection = HTTP2ClientConnection.Configuration(host: endpoint.host, port: endpoint.port)
        connection.requestTimeout = settings.apnsRequestTimeout
        connection.keepsResponseHeaders = false
        return connection
    }

    /// The other APNs environment's pool, opened on first use (nil when there is none: `Settings.otherAPNsBaseURL`).
    private static func otherEnvironment(settings: Settings, tls: TLSContext, logger: Logger, waker: Waker) throws -> OtherAPNsEnvironment? {
        guard let url = settings.otherAPNsBaseURL else { return nil }
        guard let endpoint = APNsEndpoint(url) else {
            throw ConfigurationError(variable: "APNS_SANDBOX_URL", message: "cannot use \(url)")
        }
        let connection = connectionConfiguration(endpoint, settings: settings)
        let environment = settings.otherAPNsEnvironment
        return OtherAPNsEnvironment(environment: environment) { [connection] in
            let pool = APNsConnectionPool(
                configuration: connection, connections: 1, tls: tls,
                logger: logger.child(label: "apns-\(environment.rawValue)"), loopName: "apns-\(environment.rawValue)",
                onChange: { waker.wake() })
            pool.start()
            return pool
        }
    }
}

final class Waker: Sendable {
    let target = Mutex<DeliveryEngine?>(nil)
    func wake() { target.withLock { $0 }?.wake() }
}
