import Common
import Deliver
import Foundation
import HTTP2
import Queue
import Simulator
import Synchronization
import TestSupport
import Testing

/// A clock tests can move forward (provider-token ages), starting at real time.
final class MovableClock: WallClock {
    let offset = Atomic<Int64>(0)
    func nowMillis() -> Int64 { SystemClock().nowMillis() + offset.load(ordering: .relaxed) }
    func advance(_ duration: Duration) { offset.add(duration.wholeMilliseconds, ordering: .relaxed) }
}

/// A real delivery engine, store (SQLite, or PostgreSQL on the shared throwaway server) and connection pool against
/// the in-process APNs simulator.
final class DeliveryHarness {
    let directory = TemporaryDirectory()
    let store: any RelayStore
    let simulator: APNsSimulator
    /// The other APNs environment (sandbox, the relay being configured for production), when asked for.
    let sandbox: APNsSimulator?
    let other: OtherAPNsEnvironment?
    let pool: APNsConnectionPool
    let engine: DeliveryEngine
    let tokens: ProviderTokenSource
    let clock = MovableClock()
    let metrics = MetricsRegistry()
    /// What the engine and its pools logged, at info and above: the lines the outage runbook tells operators to look for.
    let logLines = LogCapture()
    /// The PostgreSQL database's connection string (nil on SQLite), for a second store as another process would open.
    let databaseURL: String?
    static let topic = "com.example.kumapush"

    init(
        streams: UInt32 = 1000, connections: Int = 2, requestTimeout: Duration = .seconds(5), ttl: Duration = .seconds(3600),
        deviceBurst: Int? = nil, stallTimeout: Duration = .seconds(30), withSandbox: Bool = false,
        leaseBeyondRequest: Duration = .seconds(30), retryBackoff: Backoff = Backoff(base: .milliseconds(10), cap: .milliseconds(200)),
        onPostgres: Bool = false, pollInterval: Duration = .milliseconds(2), idlePollInterval: Duration? = nil,
        engineStore: (SQLiteStore) -> any RelayStore = { $0 }
    ) throws {
        let storeForEngine: any RelayStore
        databaseURL = onPostgres ? try PostgresServer.shared().createDatabase() : nil
        if let databaseURL {
            let postgres = try PostgresStore(url: databaseURL, now: SystemClock().nowMillis())
            store = postgres
            storeForEngine = postgres
        } else {
            let sqlite = try SQLiteStore(path: directory.path("relay.db"), now: SystemClock().nowMillis())
            store = sqlite
            storeForEngine = engineStore(sqlite)
        }
        var simConfig = APNsSimulator.Configuration(
            certificateFile: TLSFixtures.path("server.pem"), privateKeyFile: TLSFixtures.path("server.key"),
            tokenKeyFile: TLSFixtures.signingPublicKey)
        simConfig.port = 0
        simConfig.topic = Self.topic
        simConfig.keyID = "KEY1234567"
        simConfig.teamID = "TEAM123456"
        simConfig.clock = clock
        simConfig.maxConcurrentStreams = streams
        simulator = try APNsSimulator(simConfig)
        sandbox = withSandbox ? try APNsSimulator(simConfig) : nil
        let key = try ES256.PrivateKey(pem: Array(try Data(contentsOf: URL(fileURLWithPath: TLSFixtures.signingKey))))
        tokens = ProviderTokenSource(key: key, keyID: "KEY1234567", teamID: "TEAM123456", clock: clock)
        var connection = HTTP2ClientConnection.Configuration(host: "127.0.0.1", port: simulator.port)
        connection.requestTimeout = requestTimeout
        connection.keepsResponseHeaders = false  // as DeliveryRuntime's connections
        let logger = Logger(label: "test", level: .info, sink: LogSink(format: .text) { [logLines] line in logLines.append(line) })
        let waker = Waker()
        pool = APNsConnectionPool(
            configuration: connection, connections: connections,
            tls: try TLSContext.client(extraCAFile: TLSFixtures.caFile), logger: logger, onChange: { waker.wake() })
        var settings = Settings()
        settings.retryBase = retryBackoff.base
        settings.retryMax = retryBackoff.cap
        // As the start-up check demands: the lease outlives a request (the engine sends only while it does).
        settings.apnsRequestTimeout = requestTimeout
        settings.leaseTimeout = requestTimeout + leaseBeyondRequest
        settings.jobTTL = ttl
        settings.deviceBurst = deviceBurst
        settings.stallTimeout = stallTimeout
        var configuration = DeliveryEngine.Configuration(settings: settings, worker: "test-worker")
        configuration.pollInterval = pollInterval
        if let idlePollInterval { configuration.idlePollInterval = idlePollInterval }
        let tls = try TLSContext.client(extraCAFile: TLSFixtures.caFile)
        other = sandbox.map { sandbox in
            var sandboxConnection = connection
            sandboxConnection.port = sandbox.port
            return OtherAPNsEnvironment(environment: .sandbox) { [sandboxConnection] in
                let pool = APNsConnectionPool(
                    configuration: sandboxConnection, connections: 1, tls: tls, logger: logger,
                    onChange: { waker.wake() })
                pool.start()
                return pool
            }
        }
        engine = DeliveryEngine(
            configuration: configuration, store: storeForEngine, pool: pool, other: other, tokens: tokens,
            factory: APNsRequestFactory(topic: Self.topic, lateNotice: .seconds(120)),
            clock: clock, logger: logger, metrics: metrics)
        waker.engine.withLock { $0 = engine }
        pool.start()
        engine.start()
    }

    func stop() {
        engine.shutdown(grace: .seconds(2))
        pool.shutdown()
        other?.shutdown()
        simulator.stop()
        sandbox?.stop()
    }

    /// Registers a device for `seed`; returns (id, token).
    func device(_ seed: Int) throws -> (id: String, token: String) {
        let token = String(format: "%064x", seed)
        let id = try store.registerDevice(token: token, authTokenHash: "h", now: clock.nowMillis(), newID: { try DeviceID.generate() }).device.id
        return (id, token)
    }

    /// Enqueues a monitor-down alert whose message is `label`.
    /// `acceptedAgo`: the jobs are stored as if their webhook came that long ago (LATE_NOTICE). `through`: another
    /// store on the same database, as a separate ingest process would write, which does not wake the engine itself.
    func enqueue(
        _ deviceID: String, _ labels: [String], test: Bool = false, ttl: Duration = .seconds(3600), acceptedAgo: Duration = .zero,
        through ingest: (any RelayStore)? = nil
    ) throws {
        let jobs = labels.map { label in
            let event = test ? AlertEvent.test(label) : AlertEvent(kind: .monitor, status: .down, monitorID: 1, monitorName: "DB", message: label)
            return NewJob(
                deviceID: deviceID, publicID: UUID().uuidString.lowercased(), payload: event.jobPayload,
                reportsOutcome: test)
        }
        _ = try (ingest ?? store).enqueue(jobs, now: clock.nowMillis() - acceptedAgo.wholeMilliseconds, ttl: ttl)
        if ingest == nil { engine.wake() }
    }

    /// Waits (with a deadline) until `condition` holds.
    @discardableResult
    func waitUntil(timeout: Duration = .seconds(20), _ condition: () throws -> Bool) rethrows -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if try condition() { return true }
            Thread.sleep(forTimeInterval: 0.005)
        }
        return try condition()
    }

    /// Bodies of the pushes APNs accepted for `token`, in arrival order. A push without a readable body fails the
    /// test that asked (it is never silently left out of the list).
    func acceptedBodies(_ token: String) -> [String] {
        simulator.received.filter { $0.token == token && $0.status == 200 }.map { push in
            let object = try? JSONSerialization.jsonObject(with: Data(push.payload)) as? [String: Any]
            guard let body = ((object?["aps"] as? [String: Any])?["alert"] as? [String: Any])?["body"] as? String else {
                Issue.record("a push APNs accepted has no aps.alert.body: \(String(decoding: push.payload, as: UTF8.self))")
                return "<unreadable>"
            }
            return body
        }
    }
}

final class Waker: Sendable {
    let engine = Mutex<DeliveryEngine?>(nil)
    func wake() { engine.withLock { $0 }?.wake() }
}
