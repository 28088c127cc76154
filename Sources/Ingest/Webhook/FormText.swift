/// Recognises a urlencoded form among the texts that arrive as `application/x-www-form-urlencoded` or `text/plain`
/// (SPEC §2.2). Those are mostly not forms: axios labels every custom body urlencoded, whatever the template wrote.
/// A real form is axios' bracket notation (`heartbeat%5Bstatus%5D=0&…`), `data=<json>`, or a template such as
/// `title={{name}}&body={{msg}}` — the last one unescaped, so its values may hold spaces, newlines, `&` and a `%` that
/// starts no escape ("100% packet loss").
enum FormText {
    /// Names that make a text a form for the relay; anything else is custom text.
    static let knownNames: Set<String> = ["data", "msg", "title", "body", "subject", "message", "text"]

    /// The decoded fields when `text` is a form holding one of `knownNames` (or `heartbeat[…]`/`monitor[…]`);
    /// nil when it is custom text. Values that decode to invalid UTF-8 make it not a form either.
    static func fields(_ text: String) -> [String: String]? {
        let bytes = Array(text.utf8)
        // JSON-looking text is never a form, whatever `&name=` it holds inside its strings.
        guard let first = bytes.first, !"{[\"".utf8.contains(first), nameLength(bytes, from: 0) != nil else { return nil }
        // Raw spaces or line breaks: a template wrote this unescaped, so its values are text that may hold `&x=`: a
        // monitor URL's query (`…/health?key=abc&region=eu`) is not split there (`startsField`).
        let unescaped = bytes.contains { $0 == 0x20 || $0 == 0x0a || $0 == 0x0d || $0 == 0x09 }
        var fields: [String: String] = [:]
        var start = 0
        while start <= bytes.count {
            var end = start
            // A pair ends at an `&` that starts another field; any other `&` is part of the value.
            while end < bytes.count, !(bytes[end] == UInt8(ascii: "&") && startsField(bytes, at: end + 1, unescaped: unescaped)) {
                end += 1
            }
            let pair = bytes[start..<end]
            if let equals = pair.firstIndex(of: UInt8(ascii: "=")) {
                guard let name = decode(pair[start..<equals]), let value = decode(pair[(equals + 1)...]) else { return nil }
                fields[name] = value
            }
            start = end + 1
        }
        let isForm = fields.keys.contains { knownNames.contains($0) || $0.hasPrefix("heartbeat[") || $0.hasPrefix("monitor[") }
        return isForm ? fields : nil
    }

    /// Whether a field starts at `at`, just after an `&`: a `name=`; in unescaped text not when the `&` continues a
    /// URL's query (the word it is in holds a `?`), unless the name is one the relay reads.
    private static func startsField(_ bytes: [UInt8], at: Int, unescaped: Bool) -> Bool {
        guard let length = nameLength(bytes, from: at) else { return false }
        guard unescaped else { return true }
        if let name = decode(bytes[at..<(at + length - 1)]),
            knownNames.contains(name) || name.hasPrefix("heartbeat[") || name.hasPrefix("monitor[")
        {
            return true
        }
        var i = at - 2
        while i >= 0, !(bytes[i] == 0x20 || bytes[i] == 0x0a || bytes[i] == 0x0d || bytes[i] == 0x09) {
            if bytes[i] == UInt8(ascii: "?") { return false }
            i -= 1
        }
        return true
    }

    /// The length of `name=` at `from` when the bytes there are a field name (letters, digits, `_.-~[]` and `%XX`)
    /// followed by `=`.
    private static func nameLength(_ bytes: [UInt8], from: Int) -> Int? {
        var i = from
        while i < bytes.count {
            let byte = bytes[i]
            if byte == UInt8(ascii: "=") { return i > from ? i - from + 1 : nil }
            let isNameByte =
                (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || "_.-~[]%".utf8.contains(byte)
            guard isNameByte else { return nil }
            i += 1
        }
        return nil
    }

    /// Form decoding that forgives unescaped text: `+` is a space, `%XX` a byte, and a `%` without two hex digits
    /// is itself. Nil when the result is not UTF-8.
    private static func decode(_ text: ArraySlice<UInt8>) -> String? {
        var out: [UInt8] = []
        out.reserveCapacity(text.count)
        var i = text.startIndex
        while i < text.endIndex {
            let byte = text[i]
            if byte == UInt8(ascii: "+") {
                out.append(0x20)
            } else if byte == UInt8(ascii: "%"), i + 2 < text.endIndex, let high = hexValue(text[i + 1]), let low = hexValue(text[i + 2]) {
                out.append(high << 4 | low)
                i += 3
                continue
            } else {
                out.append(byte)
            }
            i += 1
        }
        return String(validating: out, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        Character(Unicode.Scalar(byte)).hexDigitValue.map(UInt8.init)
    }
}
