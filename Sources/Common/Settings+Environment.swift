import Foundation

/// The one place that reads settings from the outside world.
///
/// Every variable of SPEC §6 is a row of `Settings.variables`: its name, its default as an operator writes it, a
/// one-line meaning and how its text is applied. The command-line flag of a variable is its name in lower case with
/// dashes (`DATABASE_PATH` → `--database-path`) and overrides the environment. README's configuration table is
/// checked against these rows by a test, so the two cannot drift.
extension Settings {
    /// One configurable variable.
    public struct Variable: Sendable {
        public let name: String
        /// The default as text, exactly as it could be written in the environment ("" when there is none).
        public let defaultText: String
        public let summary: String
        let apply: @Sendable (inout Settings, String) throws(ConfigurationError) -> Void

        /// The flag that overrides this variable, e.g. `--database-path`.
        public var flag: String { "--" + name.lowercased().replacingOccurrences(of: "_", with: "-") }
    }

    /// Reads the environment, then lets flags override it. Returns the settings and the arguments that were not
    /// setting flags (subcommand options and positionals), in order.
    public static func load(environment: [String: String], arguments: [String]) throws(ConfigurationError)
        -> (settings: Settings, remaining: [String])
    {
        var settings = Settings()
        for variable in variables {
            if let text = environment[variable.name] { try variable.apply(&settings, text) }
        }
        var remaining: [String] = []
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            // The end of options: what follows is the command's, whatever it looks like (a device id may begin
            // with `--`).
            if argument == "--" {
                remaining += arguments[(index - 1)...]
                break
            }
            let (flag, inlineValue) = splitFlag(argument)
            guard let variable = variables.first(where: { $0.flag == flag }) else {
                remaining.append(argument)
                continue
            }
            let value: String
            if let inlineValue {
                value = inlineValue
            } else if index < arguments.count {
                value = arguments[index]
                index += 1
            } else {
                throw ConfigurationError(variable: variable.name, message: "\(variable.flag) needs a value")
            }
            try variable.apply(&settings, value)
        }
        try settings.checkConsistency()
        return (settings, remaining)
    }

    private static func splitFlag(_ argument: String) -> (String, String?) {
        guard argument.hasPrefix("--"), let equals = argument.firstIndex(of: "=") else { return (argument, nil) }
        return (String(argument[..<equals]), String(argument[argument.index(after: equals)...]))
    }

    /// Rules that involve more than one variable.
    private func checkConsistency() throws(ConfigurationError) {
        if retryMax < retryBase {
            throw ConfigurationError(variable: "RETRY_MAX", message: "must not be shorter than RETRY_BASE")
        }
        // A lease that expires while its push may still be waiting for APNs hands the job to another worker, which
        // sends it a second time (issue 12); one barely longer than a request leaves no time to send a push at all.
        if leaseTimeout < shortestLease {
            throw ConfigurationError(
                variable: "LEASE_TIMEOUT",
                message: "\(DurationSyntax.format(leaseTimeout)) must be at least APNS_REQUEST_TIMEOUT + 1.5s "
                    + "(\(DurationSyntax.format(shortestLease))), or a push still waiting for APNs is sent again by another worker")
        }
    }

    /// Every variable, in the order of SPEC §6. `ENV` comes before `APNS_ENVIRONMENT` so the latter wins.
    public static let variables: [Variable] = [
        Variable(name: "PORT", defaultText: "4321", summary: "ingest listener port") { s, text throws(ConfigurationError) in
            s.port = try parsePort(text, "PORT")
        },
        Variable(name: "HOST", defaultText: "0.0.0.0", summary: "ingest listener address (an IP literal)") { s, text throws(ConfigurationError) in
            guard IPAddress(text) != nil else { throw invalid("HOST", text, "an IP address such as 0.0.0.0 or ::1") }
            s.host = text.trimmingWhitespace()
        },
        Variable(name: "BASE_PATH", defaultText: "", summary: "mount every route under this prefix, e.g. /relay") {
            s, text throws(ConfigurationError) in
            s.basePath = try parseBasePath(text)
        },
        Variable(name: "HTTP_MAX_CONNECTIONS", defaultText: "10000", summary: "open connections the ingest listener accepts at most") {
            s, text throws(ConfigurationError) in
            s.httpMaxConnections = try parseInt(text, "HTTP_MAX_CONNECTIONS", 1...1_000_000)
        },
        Variable(
            name: "HTTP_IDLE_TIMEOUT", defaultText: "30s", summary: "close a connection that sends nothing for this long (whole seconds; at least 1s)"
        ) {
            s, text throws(ConfigurationError) in
            let timeout = try parseDuration(text, "HTTP_IDLE_TIMEOUT")
            guard timeout >= .seconds(1) else { throw invalid("HTTP_IDLE_TIMEOUT", text, "at least 1s") }
            s.httpIdleTimeout = timeout
        },
        Variable(name: "HTTP_MAX_HEADER_BYTES", defaultText: "32768", summary: "largest request line and headers, in bytes") {
            s, text throws(ConfigurationError) in
            s.httpMaxHeaderBytes = try parseInt(text, "HTTP_MAX_HEADER_BYTES", 4096...1_048_576)
        },
        Variable(name: "HTTP_REQUEST_TIMEOUT", defaultText: "10s", summary: "a request's line, headers and body must all arrive within this") {
            s, text throws(ConfigurationError) in
            let timeout = try parseDuration(text, "HTTP_REQUEST_TIMEOUT")
            guard timeout >= .seconds(1) else { throw invalid("HTTP_REQUEST_TIMEOUT", text, "at least 1s") }
            s.httpRequestTimeout = timeout
        },
        Variable(
            name: "HTTP_MAX_CONNECTIONS_PER_IP", defaultText: "2000",
            summary: "open connections per client IP (IPv6: per /64); trusted proxies excepted"
        ) { s, text throws(ConfigurationError) in
            s.httpMaxConnectionsPerIP = try parseInt(text, "HTTP_MAX_CONNECTIONS_PER_IP", 1...1_000_000)
        },
        Variable(name: "DATABASE_PATH", defaultText: "./data/kumapush.db", summary: "SQLite database (created with its folder)") {
            s, text throws(ConfigurationError) in
            guard !text.isEmpty else { throw invalid("DATABASE_PATH", text, "a file path") }
            // A URL here would become a SQLite file under a folder named `postgresql:` (an empty store: `stats`
            // showing nothing, `replay` finding nothing). The value is not echoed: it may hold a password.
            let lowered = text.lowercased()
            guard !lowered.hasPrefix("postgres://") && !lowered.hasPrefix("postgresql://") && !looksLikeConnectionString(text) else {
                throw ConfigurationError(
                    variable: "DATABASE_PATH", message: "names the SQLite file; for PostgreSQL set DATABASE_URL (--database-url)")
            }
            s.databasePath = text
        },
        Variable(
            name: "DATABASE_URL", defaultText: "",
            summary: "use PostgreSQL instead of SQLite: postgres://user:pass@host:port/db?sslmode=verify-full (libpq URI or key=value); "
                + "without sslmode the server is not verified"
        ) { s, text throws(ConfigurationError) in
            guard !text.isEmpty else {
                s.databaseURL = nil
                return
            }
            // Say which forms work rather than let libpq guess at a typo (a bare host name would be read as a database name).
            guard text.hasPrefix("postgres://") || text.hasPrefix("postgresql://") || text.contains("=") else {
                // The value is not echoed: it may hold a password.
                throw ConfigurationError(
                    variable: "DATABASE_URL",
                    message: "expected a postgres:// or postgresql:// URI or a key=value connection string")
            }
            s.databaseURL = text
        },
        Variable(
            name: "PG_LOCK_TIMEOUT", defaultText: "5s",
            summary: "PostgreSQL: a statement waiting this long for another session's lock fails (the webhooks get 503); 100ms to 1m"
        ) { s, text throws(ConfigurationError) in
            s.pgLockTimeout = try parseDuration(text, "PG_LOCK_TIMEOUT", within: .milliseconds(100)...(.seconds(60)))
        },
        Variable(
            name: "PG_IDLE_IN_TRANSACTION_TIMEOUT", defaultText: "10s",
            summary: "PostgreSQL: the server ends a session idle this long inside a transaction (a frozen host) and frees its locks; 1s to 1m"
        ) { s, text throws(ConfigurationError) in
            s.pgIdleInTransactionTimeout = try parseDuration(text, "PG_IDLE_IN_TRANSACTION_TIMEOUT", within: .seconds(1)...(.seconds(60)))
        },
        Variable(name: "SYNC", defaultText: "normal", summary: "SQLite durability: normal (survives process crashes) or full (also power loss)") {
            s, text throws(ConfigurationError) in
            s.sync = try parseEnum(text, "SYNC")
        },
        Variable(
            name: "WAL_TRUNCATE_INTERVAL", defaultText: "1m",
            summary: "truncate SQLite's write-ahead log (it keeps deleted content) when writes pause and at least this often"
        ) { s, text throws(ConfigurationError) in
            s.walTruncateInterval = try parseDuration(text, "WAL_TRUNCATE_INTERVAL")
        },
        Variable(name: "APNS_AUTH_KEY_PATH", defaultText: "", summary: "APNs signing key (.p8); required for deliver/serve") {
            s, text throws(ConfigurationError) in
            s.apnsAuthKeyPath = text.isEmpty ? nil : text
        },
        Variable(name: "APNS_KEY_ID", defaultText: "", summary: "key id of the .p8 key; required for deliver/serve") {
            s, text throws(ConfigurationError) in
            s.apnsKeyID = text.isEmpty ? nil : text
        },
        Variable(name: "APNS_TEAM_ID", defaultText: "", summary: "Apple developer team id; required for deliver/serve") {
            s, text throws(ConfigurationError) in
            s.apnsTeamID = text.isEmpty ? nil : text
        },
        Variable(name: "APP_BUNDLE_IDENTIFIER", defaultText: "", summary: "the app's bundle id, sent as apns-topic; required for deliver/serve") {
            s, text throws(ConfigurationError) in
            s.appBundleIdentifier = text.isEmpty ? nil : text
        },
        Variable(name: "ENV", defaultText: "", summary: "`development` selects the APNs sandbox") { s, text throws(ConfigurationError) in
            if text.trimmingWhitespace() == "development" { s.apnsEnvironment = .sandbox }
        },
        Variable(name: "APNS_ENVIRONMENT", defaultText: "production", summary: "production or sandbox (wins over ENV)") {
            s, text throws(ConfigurationError) in
            s.apnsEnvironment = try parseEnum(text, "APNS_ENVIRONMENT")
        },
        Variable(name: "APNS_URL", defaultText: "", summary: "APNs base URL override, e.g. https://127.0.0.1:8443 (simulator)") {
            s, text throws(ConfigurationError) in
            s.apnsURL = try parseAPNsURL(text)
        },
        Variable(
            name: "APNS_SANDBOX_URL", defaultText: "",
            summary: "the other APNs environment's base URL, tried once on BadDeviceToken; default Apple's other host unless APNS_URL is set"
        ) { s, text throws(ConfigurationError) in
            s.apnsSandboxURL = try parseAPNsURL(text, "APNS_SANDBOX_URL")
        },
        Variable(name: "APNS_CA_FILE", defaultText: "", summary: "extra PEM CA trusted for APNs (tests, simulator)") {
            s, text throws(ConfigurationError) in
            s.apnsCAFile = text.isEmpty ? nil : text
        },
        Variable(name: "APNS_CONNECTIONS", defaultText: "2", summary: "persistent HTTP/2 connections per deliver process") {
            s, text throws(ConfigurationError) in
            s.apnsConnections = try parseInt(text, "APNS_CONNECTIONS", 1...64)
        },
        Variable(
            name: "APNS_REQUEST_TIMEOUT", defaultText: "30s",
            summary: "how long a push waits for APNs' answer before it is retried; at least 1.5s below LEASE_TIMEOUT"
        ) { s, text throws(ConfigurationError) in
            s.apnsRequestTimeout = try parseDuration(text, "APNS_REQUEST_TIMEOUT")
        },
        Variable(name: "DELIVER_CONCURRENCY", defaultText: "1000", summary: "pushes in flight per deliver process") {
            s, text throws(ConfigurationError) in
            s.deliverConcurrency = try parseInt(text, "DELIVER_CONCURRENCY", 1...100_000)
        },
        Variable(name: "JOB_TTL", defaultText: "24h", summary: "how long a job may wait for APNs before it is dead-lettered") {
            s, text throws(ConfigurationError) in
            s.jobTTL = try parseDuration(text, "JOB_TTL")
        },
        Variable(name: "RETRY_BASE", defaultText: "1s", summary: "first retry delay (exponential backoff, full jitter)") {
            s, text throws(ConfigurationError) in
            s.retryBase = try parseDuration(text, "RETRY_BASE")
        },
        Variable(name: "RETRY_MAX", defaultText: "5m", summary: "longest retry delay") { s, text throws(ConfigurationError) in
            s.retryMax = try parseDuration(text, "RETRY_MAX")
        },
        Variable(
            name: "LEASE_TIMEOUT", defaultText: "60s",
            summary: "after this a crashed worker's jobs are claimable again; at least APNS_REQUEST_TIMEOUT + 1.5s"
        ) { s, text throws(ConfigurationError) in
            s.leaseTimeout = try parseDuration(text, "LEASE_TIMEOUT")
        },
        Variable(name: "DEAD_LETTER_RETENTION", defaultText: "7d", summary: "how long dead letters are kept for `replay`") {
            s, text throws(ConfigurationError) in
            s.deadLetterRetention = try parseDuration(text, "DEAD_LETTER_RETENTION")
        },
        Variable(name: "TOMBSTONE_RETENTION", defaultText: "30d", summary: "how long a device removed by APNs answers 410") {
            s, text throws(ConfigurationError) in
            s.tombstoneRetention = try parseDuration(text, "TOMBSTONE_RETENTION")
        },
        Variable(name: "QUEUE_MAX", defaultText: "1000000", summary: "waiting jobs above which webhooks get 503") {
            s, text throws(ConfigurationError) in
            s.queueMax = try parseInt(text, "QUEUE_MAX", 1...Int(Int32.max))
        },
        Variable(name: "TEST_WAIT", defaultText: "5s", summary: "how long a Test-button webhook waits for APNs' answer") {
            s, text throws(ConfigurationError) in
            s.testWait = try parseDuration(text, "TEST_WAIT", allowZero: true)
        },
        Variable(name: "LATE_NOTICE", defaultText: "2m", summary: "a push sent later than this after its webhook says so") {
            s, text throws(ConfigurationError) in
            s.lateNotice = try parseDuration(text, "LATE_NOTICE")
        },
        Variable(name: "SHUTDOWN_GRACE", defaultText: "10s", summary: "how long SIGTERM waits for pushes in flight") {
            s, text throws(ConfigurationError) in
            s.shutdownGrace = try parseDuration(text, "SHUTDOWN_GRACE", allowZero: true)
        },
        Variable(
            name: "SHUTDOWN_DELAY", defaultText: "0s",
            summary: "ingest, serve: after SIGTERM, how long to go on accepting while /readyz answers 503 (for a load balancer)"
        ) { s, text throws(ConfigurationError) in
            s.shutdownDelay = try parseDuration(text, "SHUTDOWN_DELAY", within: .zero ... .seconds(300))
        },
        Variable(name: "RATE_LIMIT_REGISTER", defaultText: "5/1m,30/1h", summary: "POST /devices per client IP; `off` disables") {
            s, text throws(ConfigurationError) in
            s.rateLimitRegister = try parseRules(text, "RATE_LIMIT_REGISTER")
        },
        Variable(name: "RATE_LIMIT_WEBHOOK", defaultText: "off", summary: "webhooks per client IP and device; `off` disables") {
            s, text throws(ConfigurationError) in
            s.rateLimitWebhook = try parseRules(text, "RATE_LIMIT_WEBHOOK")
        },
        Variable(
            name: "RATE_LIMIT_WEBHOOK_FAILED", defaultText: "10/1m",
            summary: "failed webhooks (400/404/410) per client IP; past it unknown device ids get 429; `off` disables"
        ) { s, text throws(ConfigurationError) in
            s.rateLimitWebhookFailed = try parseRules(text, "RATE_LIMIT_WEBHOOK_FAILED")
        },
        Variable(
            name: "RATE_LIMIT_WEBHOOK_IP", defaultText: "6000/1m", summary: "webhooks per client IP (IPv6: per /64) over all devices; `off` disables"
        ) { s, text throws(ConfigurationError) in
            s.rateLimitWebhookIP = try parseRules(text, "RATE_LIMIT_WEBHOOK_IP")
        },
        Variable(name: "DEVICE_BURST", defaultText: "10", summary: "pushes per device per minute before alerts merge into digests; `off` disables") {
            s, text throws(ConfigurationError) in
            s.deviceBurst = text.trimmingWhitespace().lowercased() == "off" ? nil : try parseInt(text, "DEVICE_BURST", 1...10_000)
        },
        Variable(
            name: "DEVICE_QUEUE_MAX", defaultText: "1000",
            summary: "live jobs per device; beyond it alerts merge into the waiting digest (202 merged)"
        ) { s, text throws(ConfigurationError) in
            s.deviceQueueMax = try parseInt(text, "DEVICE_QUEUE_MAX", 2...1_000_000)
        },
        Variable(name: "DEAD_LETTER_MAX", defaultText: "100000", summary: "dead letters kept at most; past it the oldest are purged first") {
            s, text throws(ConfigurationError) in
            s.deadLetterMax = try parseInt(text, "DEAD_LETTER_MAX", 1...Int(Int32.max))
        },
        Variable(
            name: "STALL_TIMEOUT", defaultText: "30s",
            summary: "a deliverer with due jobs that sent nothing this long resets its breaker and connections"
        ) { s, text throws(ConfigurationError) in
            s.stallTimeout = try parseDuration(text, "STALL_TIMEOUT")
        },
        Variable(name: "BEHIND_PROXY", defaultText: "false", summary: "take the client IP from PROXY_HEADER when the peer is a trusted proxy") {
            s, text throws(ConfigurationError) in
            s.behindProxy = try parseBool(text, "BEHIND_PROXY")
        },
        Variable(name: "PROXY_HEADER", defaultText: "X-Forwarded-For", summary: "header holding the client address chain") {
            s, text throws(ConfigurationError) in
            let name = text.trimmingWhitespace()
            guard !name.isEmpty, name.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-") }) else {
                throw invalid("PROXY_HEADER", text, "a header name such as X-Forwarded-For")
            }
            s.proxyHeader = name
        },
        Variable(name: "TRUSTED_PROXIES", defaultText: "", summary: "comma-separated CIDRs trusted besides 127.0.0.1 and ::1") {
            s, text throws(ConfigurationError) in
            s.trustedProxies = try parseNetworks(text)
        },
        Variable(name: "METRICS_ADDR", defaultText: "127.0.0.1:9464", summary: "Prometheus listener; `off` disables") {
            s, text throws(ConfigurationError) in
            if text.trimmingWhitespace().lowercased() == "off" {
                s.metricsAddress = nil
            } else if let address = ListenAddress(text) {
                s.metricsAddress = address
            } else {
                throw invalid("METRICS_ADDR", text, "host:port with an IP host, e.g. 127.0.0.1:9464, or off")
            }
        },
        Variable(name: "LOG_LEVEL", defaultText: "info", summary: "trace, debug, info, warning or error") { s, text throws(ConfigurationError) in
            guard let level = LogLevel(name: text.trimmingWhitespace().lowercased()) else {
                throw invalid("LOG_LEVEL", text, "one of trace, debug, info, warning, error")
            }
            s.logLevel = level
        },
        Variable(name: "LOG_FORMAT", defaultText: "text", summary: "text or json lines on stderr") { s, text throws(ConfigurationError) in
            s.logFormat = try parseEnum(text, "LOG_FORMAT")
        }
    ]
}

// MARK: - Value parsers, each naming its variable in the error

private func invalid(_ variable: String, _ text: String, _ expected: String) -> ConfigurationError {
    ConfigurationError(variable: variable, message: "invalid value \"\(text)\", expected \(expected)")
}

private func parsePort(_ text: String, _ variable: String) throws(ConfigurationError) -> UInt16 {
    guard let port = UInt16(text.trimmingWhitespace()), port > 0 else {
        throw invalid(variable, text, "a port number from 1 to 65535")
    }
    return port
}

private func parseInt(_ text: String, _ variable: String, _ range: ClosedRange<Int>) throws(ConfigurationError) -> Int {
    guard let value = Int(text.trimmingWhitespace()), range.contains(value) else {
        throw invalid(variable, text, "a whole number from \(range.lowerBound) to \(range.upperBound)")
    }
    return value
}

private func parseDuration(_ text: String, _ variable: String, allowZero: Bool = false) throws(ConfigurationError) -> Duration {
    guard let duration = DurationSyntax.parse(text), duration > .zero || (allowZero && duration == .zero) else {
        throw invalid(variable, text, "a duration such as 500ms, 30s, 5m, 24h or 7d")
    }
    return duration
}

/// A duration in `range`: the PostgreSQL session timeouts are seconds, not minutes (SPEC §4), and never so short
/// that a healthy session on a loaded host is cut off between two of its round trips.
private func parseDuration(_ text: String, _ variable: String, within range: ClosedRange<Duration>) throws(ConfigurationError) -> Duration {
    guard let duration = DurationSyntax.parse(text), range.contains(duration) else {
        throw invalid(
            variable, text, "a duration from \(DurationSyntax.format(range.lowerBound)) to \(DurationSyntax.format(range.upperBound)), such as 5s")
    }
    return duration
}

private func parseBool(_ text: String, _ variable: String) throws(ConfigurationError) -> Bool {
    switch text.trimmingWhitespace().lowercased() {
    case "true", "1", "yes": return true
    case "false", "0", "no", "": return false
    default: throw invalid(variable, text, "true or false")
    }
}

private func parseEnum<Value: RawRepresentable & CaseIterable>(_ text: String, _ variable: String) throws(ConfigurationError)
    -> Value where Value.RawValue == String
{
    guard let value = Value(rawValue: text.trimmingWhitespace().lowercased()) else {
        throw invalid(variable, text, "one of " + Value.allCases.map(\.rawValue).joined(separator: ", "))
    }
    return value
}

private func parseRules(_ text: String, _ variable: String) throws(ConfigurationError) -> [RateLimitRule] {
    guard let rules = RateLimitRule.parseList(text) else {
        throw invalid(variable, text, "count/window pairs such as 5/1m,30/1h, or off")
    }
    return rules
}

private func parseNetworks(_ text: String) throws(ConfigurationError) -> [IPNetwork] {
    var networks: [IPNetwork] = []
    for part in text.split(separator: ",") where !part.trimmingWhitespace().isEmpty {
        guard let network = IPNetwork(String(part)) else {
            throw invalid("TRUSTED_PROXIES", text, "comma-separated addresses or CIDRs such as 10.0.0.0/8")
        }
        networks.append(network)
    }
    return networks
}

private func parseBasePath(_ text: String) throws(ConfigurationError) -> String {
    var path = text.trimmingWhitespace()
    while path.hasSuffix("/") { path.removeLast() }
    if path.isEmpty { return "" }
    let allowed = path.unicodeScalars.allSatisfy {
        $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || "/-._~".unicodeScalars.contains($0))
    }
    guard path.hasPrefix("/"), allowed, !path.contains("//") else {
        throw invalid("BASE_PATH", text, "a path such as /relay")
    }
    return path
}

private func parseAPNsURL(_ text: String, _ name: String = "APNS_URL") throws(ConfigurationError) -> String? {
    var url = text.trimmingWhitespace()
    if url.isEmpty { return nil }
    while url.hasSuffix("/") { url.removeLast() }
    guard url.hasPrefix("https://"), APNsEndpoint(url) != nil else {
        throw invalid(name, text, "an https URL such as https://127.0.0.1:8443")
    }
    return url
}

/// Whether `text` starts like a libpq key=value connection string (`host=/run/postgresql dbname=kumapush`, also
/// `host = …`): one of libpq's keywords, any case, then `=` after optional spaces. A file path rarely looks like
/// that, and one that does can be given as `./host=…`.
func looksLikeConnectionString(_ text: String) -> Bool {
    let keywords: Set<String> = [
        "host", "hostaddr", "port", "dbname", "user", "password", "passfile", "service", "sslmode", "sslrootcert",
        "sslcert", "sslkey", "sslpassword", "gssencmode", "channel_binding", "require_auth", "connect_timeout",
        "application_name", "options", "target_session_attrs", "load_balance_hosts"
    ]
    let trimmed = text.drop { $0 == " " }
    let word = trimmed.prefix { $0.isLetter || $0 == "_" }
    let rest = trimmed.dropFirst(word.count).drop { $0 == " " }
    return rest.first == "=" && keywords.contains(word.lowercased())
}
