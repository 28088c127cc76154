import Common
import Foundation
import HTTP2
import Synchronization

/// A local APNs (SPEC §5 `apns-sim`): TLS + HTTP/2 on nghttp2's server API, verifying what APNs verifies —
/// method, path, topic, push type, priority, ids, expiration, payload size and the ES256 provider token (its key and
/// team when configured, its age both ways) — and answering like
/// APNs, with faults injected on request. `/sim/faults` (POST JSON, GET) and `/sim/stats` control and observe it.
public final class APNsSimulator: Sendable {
    public struct Configuration: Sendable {
        public var host = "127.0.0.1"
        public var port: UInt16 = 8443
        public var certificateFile: String
        public var privateKeyFile: String
        /// PEM public key (or the .p8 itself) that provider tokens must verify against.
        public var tokenKeyFile: String
        /// The only accepted apns-topic (nil: any).
        public var topic: String?
        /// The only accepted provider-token key id (`kid`) and team id (`iss`) (nil: any): a token of another key
        /// or team is 403 InvalidProviderToken, as the e2e fake and Apple answer.
        public var keyID: String?
        public var teamID: String?
        /// The clock provider-token ages and `apns-expiration` are judged by: the relay's own clock in tests that
        /// move time, so a token issued "20 minutes later" by that clock is not refused as issued in the future.
        public var clock: any WallClock = SystemClock()
        public var threads = 1
        /// Streams per connection once a push was accepted on it.
        public var maxConcurrentStreams: UInt32 = 1000
        /// As APNs does (reference/apns.md §1.6): a connection starts at one stream, is raised to
        /// `maxConcurrentStreams` by an accepted push and dropped back to one by a rejected one. A client that
        /// keeps sending on its old limit has streams refused. Off only where a test needs a fixed limit.
        public var streamLimitFollowsAnswers = true

        public init(certificateFile: String, privateKeyFile: String, tokenKeyFile: String) {
            self.certificateFile = certificateFile
            self.privateKeyFile = privateKeyFile
            self.tokenKeyFile = tokenKeyFile
        }
    }

    /// One push as received, for tests and the live log (the payload is kept: this is a development tool).
    public struct Received: Sendable, Equatable {
        public var token: String
        public var apnsID: String
        public var status: Int
        public var reason: String
        public var payload: [UInt8]
        public var headers: [String: String]
    }

    struct Counters: Sendable {
        var byStatus: [Int: Int] = [:]
        var received: [Received] = []
        var keepLog = true
    }

    public let configuration: Configuration
    private let server: Mutex<HTTP2Server?>
    private let loops: [EventLoop]
    private let publicKey: ES256.PublicKey
    public let faults = Mutex(SimulatorFaults())
    private let counters = Mutex(Counters())
    /// Verified provider tokens (verification is the costly part; APNs reuses tokens for up to an hour).
    private let verifiedTokens = Mutex<[String: (keyID: String, teamID: String, issuedAt: Int64)]>([:])
    /// A provider token issued further ahead than this is ExpiredProviderToken (a stepped-back clock, or
    /// milliseconds for seconds), as the e2e fake judges it.
    static let clockSkewSeconds: Int64 = 60
    private let onPush: (@Sendable (Received) -> Void)?

    public init(_ configuration: Configuration, onPush: (@Sendable (Received) -> Void)? = nil) throws {
        self.configuration = configuration
        self.onPush = onPush
        guard let pem = FileManager.default.contents(atPath: configuration.tokenKeyFile) else {
            throw ES256.KeyError(description: "cannot read \(configuration.tokenKeyFile)")
        }
        publicKey = try ES256.PublicKey(pem: Array(pem))
        loops = (0..<max(1, configuration.threads)).map { EventLoop(name: "apns-sim-\($0)") }
        server = Mutex(nil)
        let tls = try TLSContext.server(certificateChainFile: configuration.certificateFile, privateKeyFile: configuration.privateKeyFile)
        let started = try HTTP2Server(
            host: configuration.host, port: configuration.port, tls: tls, loops: loops,
            maxConcurrentStreams: configuration.maxConcurrentStreams,
            initialMaxConcurrentStreams: configuration.streamLimitFollowsAnswers ? 1 : nil
        ) { [weak self] request, responder in
            self?.handle(request, responder)
        }
        server.withLock { $0 = started }
    }

    public var port: UInt16 { server.withLock { $0?.port ?? 0 } }

    public func stop() {
        server.withLock { $0 }?.stop()
        for loop in loops { loop.shutdown() }
    }

    /// Pushes received so far (in arrival order), when the log is kept.
    public var received: [Received] { counters.withLock { $0.received } }
    public var answersByStatus: [Int: Int] { counters.withLock { $0.byStatus } }

    /// Keeping every push costs memory in benchmarks; they turn it off.
    public func keepLog(_ keep: Bool) { counters.withLock { $0.keepLog = keep } }

    public func resetLog() { counters.withLock { $0 = Counters(keepLog: $0.keepLog) } }

    public func setStreamLimit(_ limit: UInt32) { server.withLock { $0 }?.setMaxConcurrentStreams(limit) }

    public func dropAllConnections() { server.withLock { $0 }?.dropAllConnections() }

    public func goAwayAll(reason: String = "Shutdown") { server.withLock { $0 }?.goAwayAll(debugData: "{\"reason\":\"\(reason)\"}") }

    // MARK: Handling

    private func handle(_ request: HTTP2Server.Request, _ responder: HTTP2ServerResponder) {
        if request.path.hasPrefix("/sim/") { return control(request, responder) }
        let (fault, delay) = faults.withLock { faults -> (Fault?, Int) in
            var fault: Fault?
            if faults.dropNext {
                faults.dropNext = false
                fault = .drop
            } else if let remaining = faults.goAwayAfter {
                if remaining <= 0 {
                    faults.goAwayAfter = nil
                    fault = .goAway
                } else {
                    faults.goAwayAfter = remaining - 1
                }
            }
            if fault == nil && faults.silent { fault = .silence }
            return (fault, faults.latencyMillis)
        }
        switch fault {
        case .drop: return responder.dropConnection()
        case .goAway:
            // As APNs does when it restarts: GOAWAY naming the last stream it processed (this one, answered
            // below); streams the client opened after it are refused and must be resent on a new connection.
            responder.goAway(debugData: "{\"reason\":\"Shutdown\"}")
        case .silence: return
        case nil: break
        }
        let (status, reason) = verdict(for: request)
        if configuration.streamLimitFollowsAnswers { responder.setConnectionStreamLimit(reduced: status != 200) }
        let token = request.path.hasPrefix("/3/device/") ? String(request.path.dropFirst("/3/device/".count)) : ""
        let apnsID = request.headers["apns-id"] ?? UUID().uuidString.lowercased()
        let received = Received(token: token, apnsID: apnsID, status: status, reason: reason, payload: request.body, headers: request.headers)
        counters.withLock { counters in
            counters.byStatus[status, default: 0] += 1
            if counters.keepLog { counters.received.append(received) }
        }
        onPush?(received)
        var headers = [("apns-id", apnsID)]
        var body: [UInt8] = []
        if status != 200 {
            headers.append(("content-type", "application/json"))
            let timestamp = status == 410 ? ",\"timestamp\":\(SystemClock().nowMillis())" : ""
            body = Array("{\"reason\":\"\(reason)\"\(timestamp)}".utf8)
        }
        if delay > 0 {
            responder.respond(after: .milliseconds(delay), status: status, headers: headers, body: body)
        } else {
            responder.respond(status: status, headers: headers, body: body)
        }
    }

    enum Fault { case drop, goAway, silence }

    /// What APNs would answer (reference/apns.md §1.2–1.5).
    func verdict(for request: HTTP2Server.Request) -> (Int, String) {
        guard request.method == "POST" else { return (405, "MethodNotAllowed") }
        guard request.path.hasPrefix("/3/device/") else { return (404, "BadPath") }
        let token = request.path.dropFirst("/3/device/".count)
        guard !token.isEmpty else { return (400, "MissingDeviceToken") }
        guard token.count % 2 == 0, token.allSatisfy(\.isHexDigit) else { return (400, "BadDeviceToken") }
        guard request.duplicateHeaders.isEmpty else { return (400, "DuplicateHeaders") }
        guard let authorization = request.headers["authorization"], authorization.hasPrefix("bearer ") else {
            return (403, "MissingProviderToken")
        }
        let jwt = String(authorization.dropFirst("bearer ".count))
        let claims: (keyID: String, teamID: String, issuedAt: Int64)
        if let cached = verifiedTokens.withLock({ $0[jwt] }) {
            claims = cached
        } else {
            guard let verified = JSONWebToken.verifyProviderToken(jwt, key: publicKey) else { return (403, "InvalidProviderToken") }
            claims = verified
            verifiedTokens.withLock { tokens in
                if tokens.count > 1000 { tokens.removeAll() }
                tokens[jwt] = verified
            }
        }
        if let keyID = configuration.keyID, claims.keyID != keyID { return (403, "InvalidProviderToken") }
        if let teamID = configuration.teamID, claims.teamID != teamID { return (403, "InvalidProviderToken") }
        let issuedAt = claims.issuedAt
        let now = configuration.clock.nowMillis()
        let faults = faults.withLock { $0 }
        guard issuedAt * 1000 > now - 3_600_000, issuedAt >= faults.expireTokensIssuedBefore else { return (403, "ExpiredProviderToken") }
        guard issuedAt <= now / 1000 + Self.clockSkewSeconds else { return (403, "ExpiredProviderToken") }
        guard let topic = request.headers["apns-topic"], !topic.isEmpty else { return (400, "MissingTopic") }
        if let expected = configuration.topic, topic != expected { return (400, "BadTopic") }
        if let type = request.headers["apns-push-type"],
            !["alert", "background", "voip", "complication", "fileprovider", "mdm", "liveactivity"].contains(type)
        {
            return (400, "InvalidPushType")
        }
        if let priority = request.headers["apns-priority"], !["1", "5", "10"].contains(priority) { return (400, "BadPriority") }
        if let id = request.headers["apns-id"], UUID(uuidString: id) == nil { return (400, "BadMessageId") }
        if let expiration = request.headers["apns-expiration"], !Self.isValidExpiration(expiration, now: now) {
            return (400, "BadExpirationDate")
        }
        if let collapse = request.headers["apns-collapse-id"], collapse.utf8.count > 64 { return (400, "BadCollapseId") }
        guard !request.body.isEmpty else { return (400, "PayloadEmpty") }
        guard request.body.count <= 4096 else { return (413, "PayloadTooLarge") }
        if let rejection = faults.byToken[String(token)] { return (rejection.status, rejection.reason) }
        if now < faults.unavailableUntil { return (503, "ServiceUnavailable") }
        return (200, "")
    }

    /// UNIX epoch seconds as decimal digits: 0 (do not store) or a time. More than a year ahead can only be
    /// milliseconds (APNs stores for 30 days at most), so it is BadExpirationDate, as the e2e fake judges it.
    static func isValidExpiration(_ text: String, now: Int64) -> Bool {
        guard !text.isEmpty, text.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }), let value = Int64(text) else {
            return false
        }
        return value == 0 || value <= now / 1000 + 365 * 86_400
    }

    // MARK: Control plane

    private func control(_ request: HTTP2Server.Request, _ responder: HTTP2ServerResponder) {
        switch (request.method, request.path) {
        case ("GET", "/sim/faults"):
            let data = (try? JSONEncoder().encode(faults.withLock { $0 })) ?? Data()
            responder.respond(status: 200, headers: [("content-type", "application/json")], body: Array(data))
        case ("POST", "/sim/faults"):
            guard let updated = try? JSONDecoder().decode(SimulatorFaults.self, from: Data(request.body)) else {
                return responder.respond(status: 400, body: Array("{\"error\":\"invalid faults\"}".utf8))
            }
            faults.withLock { $0 = updated }
            responder.respond(status: 204)
        case ("GET", "/sim/stats"):
            let byStatus = answersByStatus.sorted { $0.key < $1.key }.map { "\"\($0.key)\":\($0.value)" }.joined(separator: ",")
            responder.respond(status: 200, headers: [("content-type", "application/json")], body: Array("{\"answers\":{\(byStatus)}}".utf8))
        case ("POST", "/sim/goaway"):
            responder.respond(status: 204)
            goAwayAll()
        default:
            responder.respond(status: 404, body: Array("{\"error\":\"not found\"}".utf8))
        }
    }
}
