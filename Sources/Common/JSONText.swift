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

    /// `value`'s JSON-escaped UTF-8, without quotes (a literal made of several parts). The bytes between escapes
    /// are copied as blocks: appended one by one, they cost about 2,200 instructions per APNs payload (callgrind,
    /// nineteenth session), and most text has no escape at all.
    public static func appendEscaped(_ value: String, to out: inout [UInt8]) {
        var value = value
        value.withUTF8 { bytes in
            var start = 0
            for index in bytes.indices where bytes[index] < 0x20 || bytes[index] == 0x22 || bytes[index] == 0x5c {
                out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start..<index]))
                appendEscape(of: bytes[index], to: &out)
                start = index + 1
            }
            out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start...]))
        }
    }

    /// How many bytes `byte` of a string's UTF-8 takes inside a JSON string literal, as `appendEscaped` writes it.
    public static func escapedSize(of byte: UInt8) -> Int {
        switch byte {
        case 0x22, 0x5c, 0x0a, 0x0d, 0x09: return 2
        case ..<0x20: return 6
        default: return 1
        }
    }

    /// The escape of a quote, a backslash or a control character.
    private static func appendEscape(of byte: UInt8, to out: inout [UInt8]) {
        let hex: StaticString = "0123456789abcdef"
        switch byte {
        case 0x22: out += [0x5c, 0x22]
        case 0x5c: out += [0x5c, 0x5c]
        case 0x0a: out += [0x5c, UInt8(ascii: "n")]
        case 0x0d: out += [0x5c, UInt8(ascii: "r")]
        case 0x09: out += [0x5c, UInt8(ascii: "t")]
        default:
            out += [0x5c, UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0")]
            out += [hex.utf8Start[Int(byte >> 4)], hex.utf8Start[Int(byte & 0x0f)]]
        }
    }

    /// Appends `text`'s bytes as one block (a fixed part of hand-written JSON).
    public static func appendLiteral(_ text: StaticString, to out: inout [UInt8]) {
        out.append(contentsOf: UnsafeBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }

    /// Appends `text`'s UTF-8 as one block, unescaped (text known to need no escape).
    public static func appendUTF8(_ text: String, to out: inout [UInt8]) {
        var text = text
        text.withUTF8 { out.append(contentsOf: $0) }
    }

    /// Appends `number` in decimal, as `String(number)` writes it, without making the String.
    public static func appendDecimal(_ number: Int, to out: inout [UInt8]) {
        if number < 0 { out.append(UInt8(ascii: "-")) }
        // The magnitude is unsigned, so Int.min has one too; written from the end of a buffer room for UInt.max's 20 digits.
        var rest = number.magnitude
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { buffer in
            var start = buffer.count
            repeat {
                start -= 1
                buffer.initializeElement(at: start, to: UInt8(ascii: "0") + UInt8(rest % 10))
                rest /= 10
            } while rest > 0
            out.append(contentsOf: UnsafeBufferPointer(rebasing: buffer[start...]))
        }
    }
}
