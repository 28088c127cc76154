/// Minimal JSON text helpers for hand-written output (log lines, metrics labels, small responses) where building
/// a Foundation object graph would cost more than the line itself.
public enum JSONText {
    /// `value` as a JSON string literal, with quotes, backslashes and control characters escaped.
    public static func quoted(_ value: String) -> String {
        // Most values need no escaping: one scan of the UTF-8, one concatenation.
        if !value.utf8.contains(where: { $0 < 0x20 || $0 == 0x22 || $0 == 0x5c }) { return "\"" + value + "\"" }
        var out = "\""
        out.reserveCapacity(value.utf8.count + 2)
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                if scalar.value < 0x20 {
                    let hex = String(scalar.value, radix: 16)
                    out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out + "\""
    }
}
