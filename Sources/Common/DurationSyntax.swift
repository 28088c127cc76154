/// Durations as operators write them in settings and flags: a whole number with a unit suffix,
/// `ms`, `s`, `m`, `h` or `d` (`500ms`, `90s`, `5m`, `24h`, `7d`). A bare `0` is accepted as zero.
public enum DurationSyntax {
    /// Parses `text`, or returns nil when it is not a duration.
    public static func parse(_ text: String) -> Duration? {
        let trimmed = text.trimmingWhitespace()
        if trimmed == "0" { return .zero }
        let digits = trimmed.prefix { $0.isASCII && $0.isNumber }
        let unit = trimmed.dropFirst(digits.count)
        guard !digits.isEmpty, let amount = Int64(digits) else { return nil }
        let millisPerUnit: Int64
        switch unit {
        case "ms": millisPerUnit = 1
        case "s": millisPerUnit = 1_000
        case "m": millisPerUnit = 60_000
        case "h": millisPerUnit = 3_600_000
        case "d": millisPerUnit = 86_400_000
        default: return nil
        }
        let (millis, overflow) = amount.multipliedReportingOverflow(by: millisPerUnit)
        guard !overflow else { return nil }
        return .milliseconds(millis)
    }

    /// The shortest exact spelling of `duration` in the same syntax (`90s`, `5m`, `24h`).
    public static func format(_ duration: Duration) -> String {
        let millis = duration.wholeMilliseconds
        if millis == 0 { return "0" }
        for (unit, size) in [("d", Int64(86_400_000)), ("h", 3_600_000), ("m", 60_000), ("s", 1_000)]
        where millis % size == 0 {
            return "\(millis / size)\(unit)"
        }
        return "\(millis)ms"
    }
}

extension Duration {
    /// The duration in whole milliseconds, rounded toward zero.
    public var wholeMilliseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1_000 + attoseconds / 1_000_000_000_000_000
    }

    /// The duration in seconds as a floating-point number (for metrics and human output).
    public var seconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}

extension StringProtocol {
    /// The text without leading and trailing spaces, tabs and newlines.
    public func trimmingWhitespace() -> String {
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" || $0 == "\n" || $0 == "\r" }
        guard let first = firstIndex(where: { !isSpace($0) }),
            let last = lastIndex(where: { !isSpace($0) })
        else { return "" }
        return String(self[first...last])
    }
}
