/// Misbehaviour the simulator injects on request (DESIGN "Simulator"): per-token answers, 503 windows, GOAWAY,
/// dropped connections, silence, latency.
public struct SimulatorFaults: Sendable, Equatable, Codable {
    /// Fixed answers for given device tokens: status and APNs reason (e.g. 410 Unregistered).
    public var byToken: [String: Rejection] = [:]
    /// Until this time (ms since 1970) every push gets 503 ServiceUnavailable.
    public var unavailableUntil: Int64 = 0
    /// Send GOAWAY after this many more requests (then clears itself).
    public var goAwayAfter: Int?
    /// Drop the connection on the next request (then clears itself).
    public var dropNext = false
    /// Never answer pushes (the client must time out).
    public var silent = false
    /// Delay before every answer, in milliseconds.
    public var latencyMillis: Int = 0
    /// Answer 403 ExpiredProviderToken to tokens issued before this time (seconds since 1970).
    public var expireTokensIssuedBefore: Int64 = 0

    public struct Rejection: Sendable, Equatable, Codable {
        public var status: Int
        public var reason: String

        public init(status: Int, reason: String) {
            self.status = status
            self.reason = reason
        }
    }

    public init() {}

    /// Every field is optional in the JSON, so `{"silent":true}` is a whole request.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        byToken = try container.decodeIfPresent([String: Rejection].self, forKey: .byToken) ?? [:]
        unavailableUntil = try container.decodeIfPresent(Int64.self, forKey: .unavailableUntil) ?? 0
        goAwayAfter = try container.decodeIfPresent(Int.self, forKey: .goAwayAfter)
        dropNext = try container.decodeIfPresent(Bool.self, forKey: .dropNext) ?? false
        silent = try container.decodeIfPresent(Bool.self, forKey: .silent) ?? false
        latencyMillis = try container.decodeIfPresent(Int.self, forKey: .latencyMillis) ?? 0
        expireTokensIssuedBefore = try container.decodeIfPresent(Int64.self, forKey: .expireTokensIssuedBefore) ?? 0
    }
}
