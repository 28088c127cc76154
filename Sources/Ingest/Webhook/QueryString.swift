/// `application/x-www-form-urlencoded` query strings: `&`-separated `name=value`, `+` is a space, `%XX` bytes.
public enum QueryString {
    /// The parameters (the last of a repeated name wins), or nil when an escape or the UTF-8 is invalid.
    public static func parse(_ query: String) -> [String: String]? {
        var steps = 0
        return parse(query, steps: &steps)
    }

    /// `parse(_:)`, adding to `steps` the bytes it visits: each byte once to split on `&`, once more to split its
    /// pair on `=`, and once to decode (`ParserWorkTests`).
    static func parse(_ query: String, steps: inout Int) -> [String: String]? {
        var result: [String: String] = [:]
        steps += query.utf8.count
        for pair in query.split(separator: "&", omittingEmptySubsequences: true) {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            steps += parts[0].utf8.count + 1
            guard let name = decode(parts[0], steps: &steps), let value = decode(parts.count > 1 ? parts[1] : "", steps: &steps) else {
                return nil
            }
            result[name] = value
        }
        return result
    }

    static func decode(_ text: Substring, steps: inout Int) -> String? {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(text.utf8.count)
        var iterator = text.utf8.makeIterator()
        while let byte = iterator.next() {
            steps += 1
            switch byte {
            case UInt8(ascii: "+"): bytes.append(0x20)
            case UInt8(ascii: "%"):
                steps += 2
                guard let high = iterator.next().flatMap(hexValue), let low = iterator.next().flatMap(hexValue) else { return nil }
                bytes.append(high << 4 | low)
            default: bytes.append(byte)
            }
        }
        return String(validating: bytes, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return byte - UInt8(ascii: "A") + 10
        default: return nil
        }
    }
}
