/// Minimal JSON text helpers for hand-written output (log lines, metrics labels, small responses) where building
/// a Foundation object graph would cost more than the line itself.
public enum JSONText {
    /// `value` as a JSON string literal, with quotes, backslashes and control characters escaped.
    public static func quoted(_ value: String) -> String {
        // Most values need no escaping: one scan of the UTF-8, one concatenation.
        if !value.utf8.contains(where: { $0 < 0x20 || $0 == 0x22 || $0 == 0x5c }) { return "\"" + value + "\"" }
        // The escapes themselves live in one place, the byte writer below.
        var out: [UInt8] = []
        out.reserveCapacity(value.utf8.count + 8)
        appendQuoted(value, to: &out)
        return String(decoding: out, as: UTF8.self)
    }

    /// `value` as a JSON string literal appended to `out`: the same escapes as `quoted`, written straight into a
    /// byte buffer (an APNs payload is built this way once per push, without intermediate Strings).
    public static func appendQuoted(_ value: String, to out: inout [UInt8]) {
        out.append(0x22)
        appendEscaped(value, to: &out)
        out.append(0x22)
    }

    /// `value`'s JSON-escaped UTF-8, without quotes (a literal made of several parts).
    public static func appendEscaped(_ value: String, to out: inout [UInt8]) {
        let hex: StaticString = "0123456789abcdef"
        for byte in value.utf8 {
            switch byte {
            case 0x22: out += [0x5c, 0x22]
            case 0x5c: out += [0x5c, 0x5c]
            case 0x0a: out += [0x5c, UInt8(ascii: "n")]
            case 0x0d: out += [0x5c, UInt8(ascii: "r")]
            case 0x09: out += [0x5c, UInt8(ascii: "t")]
            case ..<0x20:
                out += [0x5c, UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0")]
                out += [hex.utf8Start[Int(byte >> 4)], hex.utf8Start[Int(byte & 0x0f)]]
            default: out.append(byte)
            }
        }
    }
}
