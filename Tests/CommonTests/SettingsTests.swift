import Common
import Foundation
import Testing

@Suite struct SettingsTests {
    @Test func defaultsAreThoseOfTheSpec() throws {
        let (s, remaining) = try Settings.load(environment: [:], arguments: [])
        #expect(remaining.isEmpty)
        #expect(s.port == 4321 && s.host == "0.0.0.0" && s.basePath == "")
        #expect(s.databasePath == "./data/kumapush.db" && s.sync == .normal)
        #expect(s.apnsEnvironment == .production && s.apnsBaseURL == "https://api.push.apple.com")
        #expect(s.apnsConnections == 2 && s.deliverConcurrency == 1000 && s.apnsRequestTimeout == .seconds(30))
        #expect(s.jobTTL == .seconds(86_400) && s.retryBase == .seconds(1) && s.retryMax == .seconds(300))
        #expect(s.leaseTimeout == .seconds(60))
        #expect(s.deadLetterRetention == .seconds(7 * 86_400) && s.tombstoneRetention == .seconds(30 * 86_400))
        #expect(s.queueMax == 1_000_000)
        #expect(s.httpRequestTimeout == .seconds(10) && s.httpMaxConnectionsPerIP == 2000)
        #expect(s.testWait == .seconds(5) && s.lateNotice == .seconds(120) && s.shutdownGrace == .seconds(10))
        #expect(s.rateLimitRegister.settingText == "5/1m,30/1h")
        #expect(s.rateLimitWebhook.settingText == "off" && s.rateLimitWebhookIP.settingText == "6000/1m")
        #expect(s.rateLimitWebhookFailed.settingText == "10/1m")
        #expect(s.deviceBurst == 10 && s.deviceQueueMax == 1000 && s.stallTimeout == .seconds(30))
        #expect(!s.behindProxy && s.proxyHeader == "X-Forwarded-For" && s.trustedProxies.isEmpty)
        #expect(s.metricsAddress == ListenAddress(host: "127.0.0.1", port: 9464))
        #expect(s.logLevel == .info && s.logFormat == .text)
    }

    /// Each variable's documented default, read back through the parser, gives the built-in default.
    @Test(arguments: Settings.variables.filter { !$0.defaultText.isEmpty }.map(\.name))
    func documentedDefaultParsesToTheBuiltInDefault(name: String) throws {
        let variable = try #require(Settings.variables.first { $0.name == name })
        let (parsed, _) = try Settings.load(environment: [name: variable.defaultText], arguments: [])
        #expect(parsed == Settings())
    }

    /// A variable documented without a default (a key, a URL, a prefix) is unset by default, and set to an empty
    /// value it stays unset, as a compose file's `APNS_URL=` line means. Before, these 11 cases of the test above
    /// returned before asserting anything.
    @Test(arguments: Settings.variables.filter(\.defaultText.isEmpty).map(\.name))
    func aVariableWithoutADefaultSetEmptyIsUnset(name: String) throws {
        let (parsed, _) = try Settings.load(environment: [name: ""], arguments: [])
        #expect(parsed == Settings())
    }

    @Test func everyVariableIsReadFromTheEnvironment() throws {
        let environment = [
            "PORT": "8080", "HOST": "::1", "BASE_PATH": "/relay/", "DATABASE_PATH": "/tmp/k.db", "SYNC": "full",
            "DATABASE_URL": "postgresql://relay@db.internal/kumapush?sslmode=require",
            "WAL_TRUNCATE_INTERVAL": "5s",
            "APNS_AUTH_KEY_PATH": "/k.p8", "APNS_KEY_ID": "KEY123", "APNS_TEAM_ID": "TEAM45", "APP_BUNDLE_IDENTIFIER": "com.x.y",
            "ENV": "development", "APNS_URL": "https://127.0.0.1:8443/", "APNS_CA_FILE": "/ca.pem",
            "APNS_CONNECTIONS": "4", "APNS_REQUEST_TIMEOUT": "10s", "DELIVER_CONCURRENCY": "50", "JOB_TTL": "2h", "RETRY_BASE": "500ms",
            "RETRY_MAX": "1m",
            "LEASE_TIMEOUT": "30s", "DEAD_LETTER_RETENTION": "1d", "TOMBSTONE_RETENTION": "2d", "QUEUE_MAX": "99",
            "TEST_WAIT": "0", "LATE_NOTICE": "5m", "SHUTDOWN_GRACE": "3s", "SHUTDOWN_DELAY": "20s", "RATE_LIMIT_REGISTER": "off",
            "RATE_LIMIT_WEBHOOK": "100/10s,1000/1h", "RATE_LIMIT_WEBHOOK_FAILED": "3/1m", "RATE_LIMIT_WEBHOOK_IP": "50/1s", "DEVICE_BURST": "off",
            "BEHIND_PROXY": "true", "PROXY_HEADER": "X-Real-IP", "TRUSTED_PROXIES": "10.0.0.0/8, fd00::/8",
            "METRICS_ADDR": "off", "LOG_LEVEL": "debug", "LOG_FORMAT": "json",
            "HTTP_MAX_CONNECTIONS": "50", "HTTP_IDLE_TIMEOUT": "5s", "HTTP_MAX_HEADER_BYTES": "8192",
            "HTTP_REQUEST_TIMEOUT": "3s", "HTTP_MAX_CONNECTIONS_PER_IP": "7",
            "DEVICE_QUEUE_MAX": "50", "STALL_TIMEOUT": "2m", "APNS_SANDBOX_URL": "https://127.0.0.1:8444/",
            "DEAD_LETTER_MAX": "500", "PG_LOCK_TIMEOUT": "2s", "PG_IDLE_IN_TRANSACTION_TIMEOUT": "1500ms"
        ]
        // The test itself must not go stale: it names every variable there is.
        #expect(Set(environment.keys).union(["APNS_ENVIRONMENT"]) == Set(Settings.variables.map(\.name)))
        let (s, _) = try Settings.load(environment: environment, arguments: [])
        #expect(s.port == 8080 && s.host == "::1" && s.basePath == "/relay" && s.databasePath == "/tmp/k.db")
        #expect(s.databaseURL == "postgresql://relay@db.internal/kumapush?sslmode=require")
        #expect(s.walTruncateInterval == .seconds(5))
        #expect(s.sync == .full && s.apnsAuthKeyPath == "/k.p8" && s.apnsKeyID == "KEY123" && s.apnsTeamID == "TEAM45")
        #expect(s.appBundleIdentifier == "com.x.y" && s.apnsEnvironment == .sandbox)
        #expect(s.apnsBaseURL == "https://127.0.0.1:8443" && s.apnsCAFile == "/ca.pem")
        #expect(s.apnsConnections == 4 && s.deliverConcurrency == 50 && s.apnsRequestTimeout == .seconds(10))
        #expect(s.jobTTL == .seconds(7200) && s.retryBase == .milliseconds(500) && s.retryMax == .seconds(60))
        #expect(s.leaseTimeout == .seconds(30) && s.deadLetterRetention == .seconds(86_400))
        #expect(s.tombstoneRetention == .seconds(172_800) && s.queueMax == 99)
        #expect(s.testWait == .zero && s.lateNotice == .seconds(300) && s.shutdownGrace == .seconds(3) && s.shutdownDelay == .seconds(20))
        #expect(s.rateLimitRegister.isEmpty)
        #expect(s.rateLimitWebhook == [RateLimitRule(limit: 100, window: .seconds(10)), RateLimitRule(limit: 1000, window: .seconds(3600))])
        #expect(s.rateLimitWebhookFailed == [RateLimitRule(limit: 3, window: .seconds(60))])
        #expect(s.rateLimitWebhookIP == [RateLimitRule(limit: 50, window: .seconds(1))])
        #expect(s.deviceBurst == nil && s.behindProxy && s.proxyHeader == "X-Real-IP")
        #expect(s.trustedProxies.map(\.description) == ["10.0.0.0/8", "fd00::/8"])
        #expect(s.metricsAddress == nil && s.logLevel == .debug && s.logFormat == .json)
        #expect(s.httpMaxConnections == 50 && s.httpIdleTimeout == .seconds(5) && s.httpMaxHeaderBytes == 8192)
        #expect(s.httpRequestTimeout == .seconds(3) && s.httpMaxConnectionsPerIP == 7)
        #expect(s.deviceQueueMax == 50 && s.stallTimeout == .seconds(120) && s.deadLetterMax == 500)
        #expect(s.apnsSandboxURL == "https://127.0.0.1:8444" && s.otherAPNsBaseURL == "https://127.0.0.1:8444")
        #expect(s.otherAPNsEnvironment == .production, "ENV=development: the other environment is production")
        #expect(s.pgLockTimeout == .seconds(2) && s.pgIdleInTransactionTimeout == .milliseconds(1500))
    }

    /// SPEC §4: the other environment is Apple's other host, or APNS_SANDBOX_URL; a custom APNS_URL (a simulator,
    /// a proxy) with no APNS_SANDBOX_URL means there is no other environment to try.
    @Test func theOtherAPNsEnvironmentIsAppleSOtherHostUnlessAPNsURLPointsElsewhere() throws {
        let (production, _) = try Settings.load(environment: [:], arguments: [])
        #expect(production.otherAPNsEnvironment == .sandbox && production.otherAPNsBaseURL == "https://api.sandbox.push.apple.com")
        let (sandbox, _) = try Settings.load(environment: ["APNS_ENVIRONMENT": "sandbox"], arguments: [])
        #expect(sandbox.otherAPNsEnvironment == .production && sandbox.otherAPNsBaseURL == "https://api.push.apple.com")
        let (simulator, _) = try Settings.load(environment: ["APNS_URL": "https://127.0.0.1:8443"], arguments: [])
        #expect(simulator.otherAPNsBaseURL == nil)
    }

    /// Both forms libpq takes select PostgreSQL; the value may hold a password, so logs name only the variable.
    @Test func databaseURLTakesAURIOrKeyValuesAndIsNeverShown() throws {
        for url in ["postgres://u:secret@h/db", "postgresql:///db?host=/run/pg", "host=/run/pg dbname=db password=secret"] {
            let (s, _) = try Settings.load(environment: ["DATABASE_URL": url], arguments: [])
            #expect(s.databaseURL == url)
            #expect(!s.databaseLabel.contains("secret") && s.databaseLabel.contains("DATABASE_URL"))
        }
        let (sqlite, _) = try Settings.load(environment: [:], arguments: [])
        #expect(sqlite.databaseURL == nil && sqlite.databaseLabel == "./data/kumapush.db")
        let error = #expect(throws: ConfigurationError.self) {
            _ = try Settings.load(environment: ["DATABASE_URL": "secret-host"], arguments: [])
        }
        #expect(error.map { !"\($0)".contains("secret") } == true)
    }

    @Test func apnsEnvironmentWinsOverEnv() throws {
        let (s, _) = try Settings.load(environment: ["ENV": "development", "APNS_ENVIRONMENT": "production"], arguments: [])
        #expect(s.apnsEnvironment == .production)
        let (sandbox, _) = try Settings.load(environment: ["APNS_ENVIRONMENT": "sandbox"], arguments: [])
        #expect(sandbox.apnsBaseURL == "https://api.sandbox.push.apple.com")
    }

    /// One value per variable that must stop start-up, naming that variable. Variables that take free text
    /// (paths, ids) have no invalid value and are listed separately, so a new variable cannot slip past this test.
    static let invalidValues: [String: String] = [
        "PORT": "abc", "HOST": "example.com", "BASE_PATH": "relay", "DATABASE_PATH": "", "DATABASE_URL": "db.internal", "SYNC": "sometimes",
        "WAL_TRUNCATE_INTERVAL": "0s",
        "APNS_ENVIRONMENT": "staging", "APNS_URL": "http://127.0.0.1:8443", "APNS_CONNECTIONS": "0", "APNS_REQUEST_TIMEOUT": "0s",
        "DELIVER_CONCURRENCY": "-5", "JOB_TTL": "24", "RETRY_BASE": "1x", "RETRY_MAX": "0s", "LEASE_TIMEOUT": "soon",
        "DEAD_LETTER_RETENTION": "7days", "TOMBSTONE_RETENTION": "-1d", "QUEUE_MAX": "many", "TEST_WAIT": "5",
        "LATE_NOTICE": "2 min", "SHUTDOWN_GRACE": "x", "SHUTDOWN_DELAY": "6m", "RATE_LIMIT_REGISTER": "5", "RATE_LIMIT_WEBHOOK": "0/1m",
        "RATE_LIMIT_WEBHOOK_FAILED": "10/0s", "RATE_LIMIT_WEBHOOK_IP": "6000", "DEVICE_BURST": "none", "BEHIND_PROXY": "maybe",
        "PROXY_HEADER": "X Forwarded", "TRUSTED_PROXIES": "10.0.0.0/33", "METRICS_ADDR": "localhost",
        "LOG_LEVEL": "loud", "LOG_FORMAT": "xml",
        "HTTP_MAX_CONNECTIONS": "0", "HTTP_IDLE_TIMEOUT": "500ms", "HTTP_MAX_HEADER_BYTES": "12",
        "HTTP_REQUEST_TIMEOUT": "200ms", "HTTP_MAX_CONNECTIONS_PER_IP": "0",
        "DEVICE_QUEUE_MAX": "1", "STALL_TIMEOUT": "0s", "APNS_SANDBOX_URL": "http://127.0.0.1:8444", "DEAD_LETTER_MAX": "0",
        "PG_LOCK_TIMEOUT": "5m", "PG_IDLE_IN_TRANSACTION_TIMEOUT": "500ms"
    ]
    static let freeText: Set = ["APNS_AUTH_KEY_PATH", "APNS_KEY_ID", "APNS_TEAM_ID", "APP_BUNDLE_IDENTIFIER", "ENV", "APNS_CA_FILE"]

    /// An operator who passes the PostgreSQL URL to `--database-path` (the runbook's SQLite commands) got a new, empty
    /// SQLite file under `./postgresql:/…`, and `stats` reported an empty queue.
    @Test func aPostgresURLGivenAsTheSQLitePathIsRefusedWithoutEchoingIt() {
        for url in [
            "postgres://kumapush:secret@db/kumapush", "postgresql:///kumapush?host=/run/postgresql&password=secret",
            "host=/run/postgresql dbname=kumapush password=secret", "dbname=kumapush",
            "host = /run/postgresql dbname = kumapush password = secret", "POSTGRES://kumapush:secret@db/kumapush"
        ] {
            let error = #expect(throws: ConfigurationError.self) {
                _ = try Settings.load(environment: [:], arguments: ["--database-path", url])
            }
            #expect(error?.variable == "DATABASE_PATH")
            #expect(error?.description.contains("DATABASE_URL") == true)
            #expect(error?.description.contains("secret") == false)
        }
    }

    /// Only a first word naming a libpq keyword is taken for a connection string: other paths with `=` stay paths.
    @Test func aPathWithAnEqualsSignIsStillAPath() throws {
        for path in ["/var/lib/kumapush/a=b.db", "./host=x.db", "data/kumapush.db"] {
            #expect(try Settings.load(environment: [:], arguments: ["--database-path", path]).settings.databasePath == path)
        }
    }

    @Test func everyVariableIsCoveredByTheInvalidValueTable() {
        #expect(Set(Self.invalidValues.keys).union(Self.freeText) == Set(Settings.variables.map(\.name)))
    }

    @Test(arguments: invalidValues.sorted { $0.key < $1.key })
    func invalidValueNamesItsVariable(name: String, value: String) throws {
        let error = #expect(throws: ConfigurationError.self) {
            _ = try Settings.load(environment: [name: value], arguments: [])
        }
        #expect(error?.variable == name)
        #expect(error?.description.hasPrefix(name) == true)
        // The same value as a flag fails the same way.
        let flag = "--" + name.lowercased().replacingOccurrences(of: "_", with: "-")
        let flagError = #expect(throws: ConfigurationError.self) {
            _ = try Settings.load(environment: [:], arguments: [flag, value])
        }
        #expect(flagError?.variable == name)
    }

    @Test func flagsOverrideTheEnvironmentAndLeaveOtherArguments() throws {
        let (s, remaining) = try Settings.load(
            environment: ["PORT": "1000", "LOG_FORMAT": "json"],
            arguments: ["--port", "2000", "--reason", "BadDeviceToken", "--log-format=text", "--dry-run"])
        #expect(s.port == 2000 && s.logFormat == .text)
        #expect(remaining == ["--reason", "BadDeviceToken", "--dry-run"])
    }

    @Test func aFlagWithoutValueNamesItsVariable() {
        let error = #expect(throws: ConfigurationError.self) { _ = try Settings.load(environment: [:], arguments: ["--port"]) }
        #expect(error?.variable == "PORT")
    }

    @Test func retryMaxShorterThanRetryBaseIsRejected() {
        let error = #expect(throws: ConfigurationError.self) {
            _ = try Settings.load(environment: ["RETRY_BASE": "10s", "RETRY_MAX": "5s"], arguments: [])
        }
        #expect(error?.variable == "RETRY_MAX")
    }

    /// Issue 12: a lease shorter than the APNs request timeout hands a push still in flight to another worker. The
    /// lease must also leave the second a loaded host may take to reset a request, and time to send the push.
    @Test func aLeaseThatCannotOutliveARequestStopsStartUpNamingBoth() throws {
        for environment in [
            ["LEASE_TIMEOUT": "20s"], ["LEASE_TIMEOUT": "30s"], ["LEASE_TIMEOUT": "31s"], ["APNS_REQUEST_TIMEOUT": "2m"],
            ["LEASE_TIMEOUT": "2s", "APNS_REQUEST_TIMEOUT": "5s"], ["LEASE_TIMEOUT": "2s", "APNS_REQUEST_TIMEOUT": "1500ms"]
        ] {
            let error = #expect(throws: ConfigurationError.self) { _ = try Settings.load(environment: environment, arguments: []) }
            #expect(error?.variable == "LEASE_TIMEOUT")
            #expect(error?.message.contains("APNS_REQUEST_TIMEOUT + 1.5s") == true)
        }
        let (short, _) = try Settings.load(environment: ["LEASE_TIMEOUT": "3s", "APNS_REQUEST_TIMEOUT": "1500ms"], arguments: [])
        #expect(short.leaseTimeout == .seconds(3) && short.apnsRequestTimeout == .milliseconds(1500))
        #expect(short.leaseNeededToSend == .milliseconds(2500))
    }

    @Test func deliveryNeedsTheAPNsCredentials() throws {
        let (partial, _) = try Settings.load(environment: ["APNS_AUTH_KEY_PATH": "/k.p8", "APNS_KEY_ID": "K"], arguments: [])
        let error = #expect(throws: ConfigurationError.self) { try partial.validateForDelivery() }
        #expect(error?.variable == "APNS_TEAM_ID")
        let (full, _) = try Settings.load(
            environment: [
                "APNS_AUTH_KEY_PATH": "/k.p8", "APNS_KEY_ID": "K", "APNS_TEAM_ID": "T", "APP_BUNDLE_IDENTIFIER": "b"
            ], arguments: [])
        try full.validateForDelivery()
    }

    /// README's configuration table lists exactly the variables the code reads, with the same defaults.
    @Test func readmeConfigurationTableMatchesTheCode() throws {
        let readme = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("README.md")
        let text = try String(contentsOf: readme, encoding: .utf8)
        let section = try #require(text.components(separatedBy: "\n## Configuration\n").dropFirst().first)
            .components(separatedBy: "\n## ")[0]
        var documented: [String: String] = [:]
        for line in section.split(separator: "\n") where line.hasPrefix("| `") {
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).map { $0.trimmingWhitespace() }
            guard cells.count >= 4 else { continue }
            let name = cells[1].trimmingCharacters(in: CharacterSet(charactersIn: "`"))
            documented[name] = cells[2].trimmingCharacters(in: CharacterSet(charactersIn: "`"))
        }
        for variable in Settings.variables {
            #expect(documented[variable.name] == variable.defaultText, "README row for \(variable.name)")
        }
        #expect(Set(documented.keys) == Set(Settings.variables.map(\.name)))
    }
}

@Suite struct DeployedConfigurationTests {
    /// deploy/kumapush.env.example names every variable the code reads, so operators see them all.
    @Test func theEnvironmentExampleCoversEveryVariable() throws {
        let example = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("deploy/kumapush.env.example")
        let text = try String(contentsOf: example, encoding: .utf8)
        let named = Set(
            text.split(separator: "\n").compactMap { line -> String? in
                let trimmed = line.hasPrefix("#") ? line.dropFirst() : line[...]
                guard let equals = trimmed.firstIndex(of: "="), trimmed[..<equals].allSatisfy({ $0.isUppercase || $0 == "_" }) else { return nil }
                return String(trimmed[..<equals])
            })
        #expect(named == Set(Settings.variables.map(\.name)))
    }
}
