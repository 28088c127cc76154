/// Recognises a urlencoded form among the texts that arrive as `application/x-www-form-urlencoded` or `text/plain`
/// (SPEC §2.2). Those are mostly not forms: axios labels every custom body urlencoded, whatever the template wrote.
/// A real form is axios' bracket notation (`heartbeat%5Bstatus%5D=0&…`), `data=<json>`, or a template such as
/// `title={{name}}&body={{msg}}` — the last one unescaped, so its values may hold spaces, newlines, `&` and a `%` that
/// starts no escape ("100% packet loss").
///
/// The text comes from anyone who can reach `/wh/`, before the device is looked up, so reading it is one forward
/// pass: every byte is visited a bounded number of times, however the `&` and `=` are arranged (docs/threat-model.md).
enum FormText {
    /// Names that make a text a form for the relay; anything else is custom text.
    static let knownNames: Set<String> = ["data", "msg", "title", "body", "subject", "message", "text"]

    /// The most fields a form may hold and still be read as one. Uptime Kuma's largest form, a monitor in bracket
    /// notation, holds 70–110 (`Tests/Fixtures/webhooks`: 71 and 105 leaves); ten times that leaves room for a
    /// monitor with many tags or status codes. Past it the text is custom text, not a 400: the push still goes out
    /// with the text as its body, so no alert is lost, and the relay never builds a dictionary of thousands of names.
    static let maximumFields = 1_000

    /// The decoded fields when `text` is a form holding one of `knownNames` (or `heartbeat[…]`/`monitor[…]`);
    /// nil when it is custom text. Values that decode to invalid UTF-8 make it not a form either, and so do more
    /// than `maximumFields` fields.
    static func fields(_ text: String) -> [String: String]? {
        var steps = 0
        return fields(text, steps: &steps)
    }

    /// `fields(_:)`, adding to `steps` one for each byte any of its loops visits: the tests hold the parse linear by
    /// this count (`ParserWorkTests`), not by a clock.
    static func fields(_ text: String, steps: inout Int) -> [String: String]? {
        let bytes = Array(text.utf8)
        // JSON-looking text is never a form, whatever `&name=` it holds inside its strings.
        guard let first = bytes.first, !"{[\"".utf8.contains(first), nameLength(bytes, from: 0, steps: &steps) != nil else {
            return nil
        }
        // Raw spaces or line breaks: a template wrote this unescaped, so its values are text that may hold `&x=`: a
        // monitor URL's query (`…/health?key=abc&region=eu`) is not split there (`startsField`).
        steps += bytes.count
        let unescaped = bytes.contains(where: isWhitespace)
        var fields: [String: String] = [:]
        var pairs = 0
        // Where the last whitespace and the last `?` before the scan's position are: the word an `&` is in holds a `?`
        // when the `?` came after the whitespace. Kept as the scan goes, never looked back for.
        var lastWhitespace = -1
        var lastQuestionMark = -1
        var start = 0
        while start <= bytes.count {
            pairs += 1
            guard pairs <= maximumFields else { return nil }
            var end = start
            // A pair ends at an `&` that starts another field; any other `&` is part of the value.
            while end < bytes.count {
                steps += 1
                let byte = bytes[end]
                if byte == UInt8(ascii: "&"),
                    startsField(bytes, at: end + 1, unescaped: unescaped, inQuery: lastQuestionMark > lastWhitespace, steps: &steps)
                {
                    break
                }
                if isWhitespace(byte) { lastWhitespace = end }
                if byte == UInt8(ascii: "?") { lastQuestionMark = end }
                end += 1
            }
            let pair = bytes[start..<end]
            steps += pair.count
            if let equals = pair.firstIndex(of: UInt8(ascii: "=")) {
                guard let name = decode(pair[start..<equals], plusIsSpace: !unescaped, steps: &steps),
                    let value = decode(pair[(equals + 1)...], plusIsSpace: !unescaped, steps: &steps)
                else { return nil }
                fields[name] = value
            }
            start = end + 1
        }
        let isForm = fields.keys.contains { knownNames.contains($0) || $0.hasPrefix("heartbeat[") || $0.hasPrefix("monitor[") }
        return isForm ? fields : nil
    }

    private static func isWhitespace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x0a || byte == 0x0d || byte == 0x09 }

    /// Whether a field starts at `at`, just after an `&`: a `name=`; in unescaped text not when the `&` continues a
    /// URL's query (`inQuery`: the word it is in holds a `?`), unless the name is one the relay reads.
    private static func startsField(_ bytes: [UInt8], at: Int, unescaped: Bool, inQuery: Bool, steps: inout Int) -> Bool {
        guard let length = nameLength(bytes, from: at, steps: &steps) else { return false }
        guard unescaped, inQuery else { return true }
        guard let name = decode(bytes[at..<(at + length - 1)], plusIsSpace: false, steps: &steps) else { return false }
        return knownNames.contains(name) || name.hasPrefix("heartbeat[") || name.hasPrefix("monitor[")
    }

    /// The length of `name=` at `from` when the bytes there are a field name (letters, digits, `_.-~[]` and `%XX`)
    /// followed by `=`. It stops at the first byte that is neither, so the names read after different `&` never
    /// overlap.
    private static func nameLength(_ bytes: [UInt8], from: Int, steps: inout Int) -> Int? {
        var i = from
        while i < bytes.count {
            steps += 1
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

    /// Form decoding that forgives unescaped text: `+` is a space (only in escaped text: in raw text, with its spaces
    /// as they are, a `+` is a plus, "C++" or "+01:00"), `%XX` a byte, and a `%` without two hex digits is itself.
    /// Nil when the result is not UTF-8.
    private static func decode(_ text: ArraySlice<UInt8>, plusIsSpace: Bool, steps: inout Int) -> String? {
        var out: [UInt8] = []
        out.reserveCapacity(text.count)
        var i = text.startIndex
        while i < text.endIndex {
            steps += 1
            let byte = text[i]
            if byte == UInt8(ascii: "+"), plusIsSpace {
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
