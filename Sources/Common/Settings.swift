/// Every setting of the relay (SPEC §6) in one value. Defaults live here; reading the environment and the
/// command line lives in `Settings+Environment.swift`, which also documents each variable.
public struct Settings: Sendable, Equatable {
    public enum APNsEnvironment: String, Sendable, CaseIterable { case production, sandbox }
    public enum SyncMode: String, Sendable, CaseIterable { case normal, full }
    public enum LogFormat: String, Sendable, CaseIterable { case text, json }

    // Ingest listener
    public var port: UInt16 = 4321
    public var host = "0.0.0.0"
    /// Prefix every route is mounted under, normalised to `""` or `/something` without a trailing slash.
    public var basePath = ""

    /// Connections the ingest listener keeps open at most; past it new ones wait in the listen backlog.
    public var httpMaxConnections = 10_000
    /// A connection that sends nothing this long is closed (inactivity; `httpRequestTimeout` bounds a trickle).
    public var httpIdleTimeout: Duration = .seconds(30)
    /// Per-connection buffer for the request line and headers; larger headers are refused.
    public var httpMaxHeaderBytes = 32 * 1024
    /// A request's line, headers and body must all arrive within this, however steadily they trickle.
    public var httpRequestTimeout: Duration = .seconds(10)
    /// Open connections per client IP (IPv6: per /64), trusted proxies excepted when behind one.
    public var httpMaxConnectionsPerIP = 2000

    // Storage
    public var databasePath = "./data/kumapush.db"
    /// A PostgreSQL connection string (libpq URI or key=value); when set, the store is PostgreSQL and
    /// `databasePath` is unused. It may hold a password: never log it (`databaseLabel` is what logs show).
    public var databaseURL: String?
    /// PostgreSQL `lock_timeout`: a statement waiting this long for another session's lock (a frozen host's device
    /// rows) fails, and its batch answers 503 instead of holding its other devices.
    public var pgLockTimeout: Duration = .seconds(5)
    /// PostgreSQL `idle_in_transaction_session_timeout`: the server ends a session left this long inside a
    /// transaction (a frozen, paused or cut-off host), releasing its locks. With `pgLockTimeout`, what bounds how
    /// long one host can stop the others (SPEC §4: every webhook accepted again within 15 s).
    public var pgIdleInTransactionTimeout: Duration = .seconds(10)
    /// SQLite `synchronous`: `normal` survives any process crash; `full` also survives power loss.
    public var sync = SyncMode.normal
    /// Delivered notification text stays in SQLite's write-ahead log at most this long before it is truncated.
    public var walTruncateInterval: Duration = .seconds(60)

    // APNs
    public var apnsAuthKeyPath: String?
    public var apnsKeyID: String?
    public var apnsTeamID: String?
    public var appBundleIdentifier: String?
    public var apnsEnvironment = APNsEnvironment.production
    /// Explicit APNs base URL (e.g. the simulator); nil means the one for `apnsEnvironment`.
    public var apnsURL: String?
    /// The other environment's base URL (SPEC §4: a push refused with BadDeviceToken is tried there once). Named for
    /// the common case: an App Store relay whose TestFlight and Xcode builds have sandbox tokens.
    public var apnsSandboxURL: String?
    public var apnsCAFile: String?
    public var apnsConnections = 2
    /// How long one push may wait for APNs' answer before it is retried. A lease must outlive it (LEASE_TIMEOUT).
    public var apnsRequestTimeout: Duration = .seconds(30)
    /// What a claimed push's lease must still hold for it to be sent: its request's timeout, and a second for the
    /// deliverer's threads to get the CPU on a loaded host (the timeout is enforced by the event loop, which may run
    /// late). With less, the request could still be open at APNs when the lease ends and another worker sends the
    /// job again: two requests for one device at once, and the device's next push could overtake the first.
    public var leaseNeededToSend: Duration { apnsRequestTimeout + .seconds(1) }
    /// The shortest LEASE_TIMEOUT: what a push needs to be sent, and half a second to send it in after the claim.
    public var shortestLease: Duration { leaseNeededToSend + .milliseconds(500) }
    public var deliverConcurrency = 1000

    // Delivery semantics
    public var jobTTL: Duration = .seconds(24 * 3600)
    public var retryBase: Duration = .seconds(1)
    public var retryMax: Duration = .seconds(300)
    public var leaseTimeout: Duration = .seconds(60)
    public var deadLetterRetention: Duration = .seconds(7 * 86_400)
    public var tombstoneRetention: Duration = .seconds(30 * 86_400)
    public var queueMax = 1_000_000
    public var testWait: Duration = .seconds(5)
    public var lateNotice: Duration = .seconds(120)
    public var shutdownGrace: Duration = .seconds(10)
    /// How long ingest and serve go on accepting after SIGTERM while `/readyz` answers 503, so that a load balancer
    /// in front of a self-bound listener stops sending before it closes (not needed under socket activation).
    public var shutdownDelay: Duration = .zero
    /// Pushes per device per minute before waiting alerts merge into a digest; nil disables digests.
    public var deviceBurst: Int? = 10
    /// Live jobs per device; beyond it, alerts fold into the device's waiting digest instead of growing the queue.
    public var deviceQueueMax = 1000
    /// A deliverer with due jobs, no known APNs failure and nothing sent for this long resets itself (SPEC §4).
    public var stallTimeout: Duration = .seconds(30)
    /// Dead letters kept at most; past it the oldest are purged first (a dead-lettering token cannot fill the disk).
    public var deadLetterMax = 100_000

    // Abuse limits
    public var rateLimitRegister = [
        RateLimitRule(limit: 5, window: .seconds(60)),
        RateLimitRule(limit: 30, window: .seconds(3600))
    ]
    /// Per client IP and device; off by default, because a large Uptime Kuma's incident sends one alert per monitor
    /// at once and never retries (SPEC §2.4): digests and the per-IP limit protect the relay instead.
    public var rateLimitWebhook: [RateLimitRule] = []
    /// Webhooks per client IP (IPv6: per /64) over all devices together.
    public var rateLimitWebhookIP = [RateLimitRule(limit: 6000, window: .seconds(60))]
    public var rateLimitWebhookFailed = [RateLimitRule(limit: 10, window: .seconds(60))]
    public var behindProxy = false
    public var proxyHeader = "X-Forwarded-For"
    /// Proxies whose forwarding header is believed, in addition to 127.0.0.1 and ::1.
    public var trustedProxies: [IPNetwork] = []

    // Observability
    /// Prometheus listener; nil when `off`.
    public var metricsAddress: ListenAddress? = ListenAddress(host: "127.0.0.1", port: 9464)
    public var logLevel = LogLevel.info
    public var logFormat = LogFormat.text

    public init() {}

    /// The APNs base URL deliveries go to.
    public var apnsBaseURL: String {
        if let apnsURL { return apnsURL }
        switch apnsEnvironment {
        case .production: return "https://api.push.apple.com"
        case .sandbox: return "https://api.sandbox.push.apple.com"
        }
    }

    /// The database as logs and error messages name it: the SQLite path, or just "DATABASE_URL (PostgreSQL)",
    /// since the URL may hold a password.
    public var databaseLabel: String {
        databaseURL == nil ? databasePath : "DATABASE_URL (PostgreSQL)"
    }

    /// The environment a push is tried in when the configured one refuses its token as `BadDeviceToken`.
    public var otherAPNsEnvironment: APNsEnvironment {
        apnsEnvironment == .production ? .sandbox : .production
    }

    /// The other environment's base URL: APNS_SANDBOX_URL, else Apple's host for it — unless APNS_URL points the
    /// relay somewhere else (a simulator, a proxy) and nothing says where the other environment is: then there is
    /// none, and a BadDeviceToken is final.
    public var otherAPNsBaseURL: String? {
        if let apnsSandboxURL { return apnsSandboxURL }
        guard apnsURL == nil else { return nil }
        switch otherAPNsEnvironment {
        case .production: return "https://api.push.apple.com"
        case .sandbox: return "https://api.sandbox.push.apple.com"
        }
    }

    /// Checks that the settings a delivering process needs are present (SPEC §6: required for deliver/serve).
    public func validateForDelivery() throws(ConfigurationError) {
        let required: [(String, String?)] = [
            ("APNS_AUTH_KEY_PATH", apnsAuthKeyPath), ("APNS_KEY_ID", apnsKeyID),
            ("APNS_TEAM_ID", apnsTeamID), ("APP_BUNDLE_IDENTIFIER", appBundleIdentifier)
        ]
        for (name, value) in required where (value ?? "").isEmpty {
            throw ConfigurationError(variable: name, message: "is required to deliver pushes")
        }
    }
}
