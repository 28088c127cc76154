import Common
import Foundation
import Synchronization

/// The one provider token of this process (SPEC §4, reference/apns.md §1.5): made from the .p8 key, reused for
/// 50 minutes (APNs accepts 20–60), renewed early only after APNs says `ExpiredProviderToken`, and then only
/// when the current token is at least 20 minutes old: Apple answers `TooManyProviderTokenUpdates` to anything more
/// frequent, however many in-flight requests report the token expired.
public final class ProviderTokenSource: Sendable {
    public static let lifetime: Duration = .seconds(50 * 60)
    public static let minimumForcedInterval: Duration = .seconds(20 * 60)

    struct Current: Sendable {
        var token: String
        var issuedAt: Int64  // ms
        var generation: Int
    }

    private let key: ES256.PrivateKey
    private let keyID: String
    private let teamID: String
    private let clock: any WallClock
    private let current: Mutex<Current?>
    public let refreshes = Atomic<Int>(0)

    public init(key: ES256.PrivateKey, keyID: String, teamID: String, clock: any WallClock) {
        self.key = key
        self.keyID = keyID
        self.teamID = teamID
        self.clock = clock
        current = Mutex(nil)
    }

    /// Loads the key named by APNS_AUTH_KEY_PATH; failures name the variable (exit 2 at start-up). A key file
    /// others can read is loaded but reported to `logger` (it is the one secret that can push to every user).
    public static func load(settings: Settings, clock: any WallClock, logger: Logger? = nil) throws(ConfigurationError) -> ProviderTokenSource {
        try settings.validateForDelivery()
        let path = settings.apnsAuthKeyPath ?? ""
        // The key file's own mode: `attributesOfItem` does not follow a symbolic link, whose mode is always 777.
        let keyFile = URL(fileURLWithPath: path).resolvingSymlinksInPath().path
        if let attributes = try? FileManager.default.attributesOfItem(atPath: keyFile),
            let permissions = (attributes[.posixPermissions] as? NSNumber)?.intValue, permissions & 0o004 != 0
        {
            logger?.warning(
                "the APNs signing key is world-readable: chmod 600 it, owner root, and hand it to the delivering unit with LoadCredential= (docs/operations.md)",
                ["path": path, "mode": String(permissions, radix: 8)])
        }
        guard let pem = FileManager.default.contents(atPath: path) else {
            throw ConfigurationError(variable: "APNS_AUTH_KEY_PATH", message: "cannot read \(path)")
        }
        do {
            let key = try ES256.PrivateKey(pem: Array(pem))
            let source = ProviderTokenSource(key: key, keyID: settings.apnsKeyID ?? "", teamID: settings.apnsTeamID ?? "", clock: clock)
            _ = try source.token()
            return source
        } catch {
            throw ConfigurationError(variable: "APNS_AUTH_KEY_PATH", message: "\(path) is not a usable APNs signing key: \(error)")
        }
    }

    /// The current token and its generation (which identifies it when reporting it expired).
    public func token() throws(ES256.KeyError) -> (token: String, generation: Int) {
        let now = clock.nowMillis()
        // A token "issued" in the future (the clock was stepped back) is stale too: APNs would refuse it.
        if let current = current.withLock({ $0 }), (0..<Self.lifetime.wholeMilliseconds).contains(now - current.issuedAt) {
            return (current.token, current.generation)
        }
        return try renew(now: now, replacing: nil)
    }

    /// What became of a report that a token expired.
    public enum Renewal: Sendable, Equatable {
        /// A new token was made, or one newer than the reported one already exists: send again with it.
        case renewed
        /// The reported token is the current one and under 20 minutes old, so it is not renewed (Apple refuses renewals
        /// more frequent than that). A token that young cannot have expired by a right clock: this host's clock is
        /// probably off, and sending again would only meet the same answer.
        case tooYoung
    }

    /// APNs said the token of `generation` expired: make a new one unless that already happened, or the last
    /// renewal was under 20 minutes ago (a burst of 403s for the same token must not become a burst of renewals,
    /// and Apple refuses renewals more frequent than that).
    public func expired(generation: Int) -> Renewal {
        let now = clock.nowMillis()
        guard let current = current.withLock({ $0 }), current.generation == generation else { return .renewed }
        let age = now - current.issuedAt
        guard age >= Self.minimumForcedInterval.wholeMilliseconds || age < 0 else { return .tooYoung }
        // A key that cannot sign leaves the old token; the resend meets the 403 again and ends as a retry.
        _ = try? renew(now: now, replacing: generation)
        return .renewed
    }

    private func renew(now: Int64, replacing: Int?) throws(ES256.KeyError) -> (token: String, generation: Int) {
        let token = try JSONWebToken.providerToken(keyID: keyID, teamID: teamID, issuedAt: now / 1000, key: key)
        refreshes.add(1, ordering: .relaxed)
        return current.withLock { current in
            let generation = (current?.generation ?? 0) + 1
            current = Current(token: token, issuedAt: now, generation: generation)
            return (token, generation)
        }
    }
}
