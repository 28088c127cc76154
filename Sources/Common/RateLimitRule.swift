/// One sliding-window limit: at most `limit` events within `window`.
public struct RateLimitRule: Sendable, Equatable, CustomStringConvertible {
    public var limit: Int
    public var window: Duration

    public init(limit: Int, window: Duration) {
        self.limit = limit
        self.window = window
    }

    public var description: String { "\(limit)/\(DurationSyntax.format(window))" }

    /// Parses a comma-separated list such as `5/1m,30/1h`. `off` is the empty list (no limit).
    /// Returns nil when any part is malformed, a count is not positive or a window is zero.
    public static func parseList(_ text: String) -> [RateLimitRule]? {
        let trimmed = text.trimmingWhitespace()
        if trimmed.lowercased() == "off" { return [] }
        var rules: [RateLimitRule] = []
        for part in trimmed.split(separator: ",", omittingEmptySubsequences: false) {
            let pieces = part.split(separator: "/", omittingEmptySubsequences: false)
            guard pieces.count == 2,
                let limit = Int(pieces[0].trimmingWhitespace()), limit > 0,
                let window = DurationSyntax.parse(String(pieces[1])), window > .zero
            else { return nil }
            rules.append(RateLimitRule(limit: limit, window: window))
        }
        return rules.isEmpty ? nil : rules
    }
}

extension Array where Element == RateLimitRule {
    /// The spelling `parseList` reads back: `off` for no rules.
    public var settingText: String { isEmpty ? "off" : map(\.description).joined(separator: ",") }
}
