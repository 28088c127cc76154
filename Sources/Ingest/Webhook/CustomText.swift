import Common

/// A custom body's text, as an Uptime Kuma template rendered it (SPEC §2.2 step 1): strict JSON, then tolerant JSON
/// (unescaped newlines, tabs, quotes and backslashes from `{{msg}}`), then the text itself as the body of a generic
/// push titled `KumaPush`. Only a text with nothing in it is refused.
enum CustomText {
    /// The text kept as a push body: what fits an APNs payload and then some (the payload cut adds the `…`).
    static let maximumBodyBytes = 4096

    /// - Parameter unwrapped: the text already came out of a JSON string (axios' double encoding, #7211); a JSON
    ///   string inside it is then text, not a third level of encoding.
    static func event(_ text: String, unwrapped: Bool) -> Result<AlertEvent, WebhookParser.Rejection> {
        var steps = 0
        return event(text, unwrapped: unwrapped, steps: &steps)
    }

    /// `event(_:unwrapped:)`, adding to `steps` what the JSON parsers visited (`ParserWorkTests`). At most two levels
    /// run (a JSON string inside is read once more, never deeper), each a bounded multiple of the text.
    static func event(_ text: String, unwrapped: Bool, steps: inout Int) -> Result<AlertEvent, WebhookParser.Rejection> {
        let trimmed = text.trimmingJSONWhitespace()
        guard !trimmed.isEmpty else { return .failure(.invalidBody(unwrapped ? "the JSON string is empty" : "empty body")) }
        let bytes = Array(trimmed.utf8)
        let value =
            (try? JSONParser.parse(bytes, keeping: WebhookParser.keysRead, steps: &steps))
            ?? TolerantJSONParser.parse(bytes, preference: templateLikeness, steps: &steps)
        if let value, value.isObject { return WebhookParser.fromObject(value) }
        if let inner = value?.stringValue, !unwrapped { return event(inner, unwrapped: true, steps: &steps) }
        return .success(AlertEvent(kind: .generic, message: cut(trimmed)))
    }

    /// How much a tolerant reading of a template looks like the template: a thousand points per part of a push it
    /// fills (a title key, a body key, Uptime Kuma's `heartbeat`, its `monitor`), less one per bracket its strings
    /// leave open or close without opening. A message quoting JSON (`…keyword is not in [{"status":"error","db":
    /// "down"}]`) can also be read as a body cut at `"error` (its `[{` left open) beside a made-up `db` key, or as a
    /// title that swallows the body (one part fewer): both score lower. Readings that differ only in where a plain
    /// member ends score the same, and the first found (each string ended at its first possible quote) wins.
    static func templateLikeness(_ value: JSONValue) -> Int {
        guard case .object(let members) = value else { return -unbalancedBrackets(in: value) }
        let keys = Set(members.map(\.key))
        let roles = [
            !keys.isDisjoint(with: WebhookParser.genericTitleKeys), !keys.isDisjoint(with: WebhookParser.genericBodyKeys),
            keys.contains("heartbeat"), keys.contains("monitor")
        ].count { $0 }
        return roles * 1000 - unbalancedBrackets(in: value)
    }

    /// Brackets (`[` `{` and `]` `}` alike) the strings in `value` leave open, plus those they close unopened.
    static func unbalancedBrackets(in value: JSONValue) -> Int {
        switch value {
        case .string(let text):
            var open = 0
            var unopened = 0
            for byte in text.utf8 {
                if byte == UInt8(ascii: "[") || byte == UInt8(ascii: "{") {
                    open += 1
                } else if byte == UInt8(ascii: "]") || byte == UInt8(ascii: "}") {
                    if open > 0 { open -= 1 } else { unopened += 1 }
                }
            }
            return open + unopened
        case .object(let members): return members.reduce(0) { $0 + unbalancedBrackets(in: $1.value) }
        case .array(let elements): return elements.reduce(0) { $0 + unbalancedBrackets(in: $1) }
        default: return 0
        }
    }

    /// `text` cut at a character boundary to at most `maximumBodyBytes` UTF-8 bytes.
    static func cut(_ text: String) -> String {
        guard text.utf8.count > maximumBodyBytes else { return text }
        var result = ""
        var used = 0
        for character in text {
            let size = character.utf8.count
            guard used + size <= maximumBodyBytes else { break }
            result.append(character)
            used += size
        }
        return result
    }
}

extension String {
    /// Without leading and trailing spaces, tabs, CR and LF (what a template's line breaks leave around the text).
    func trimmingJSONWhitespace() -> String {
        let bytes = Array(utf8)
        guard let first = bytes.firstIndex(where: { !$0.isJSONWhitespace }),
            let last = bytes.lastIndex(where: { !$0.isJSONWhitespace })
        else { return "" }
        return String(decoding: bytes[first...last], as: UTF8.self)
    }
}
