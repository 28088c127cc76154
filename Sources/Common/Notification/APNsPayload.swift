/// The JSON body of an APNs request, never over APNs' 4096-byte limit (SPEC §3).
public enum APNsPayload {
    public static let maximumBytes = 4096
    static let ellipsis = "…"

    /// `{"aps":{"alert":{"title":…,"body":…},"sound":"default","interruption-level":…,"thread-id":…,"badge":…}}`.
    /// When too long, the body is cut first, then the title, at a character boundary, ending in `…`;
    /// the body suffix (a late notice) is kept whole after the cut body.
    public static func encode(_ notification: PushMessage) -> [UInt8] {
        var title = notification.title
        var body = notification.body
        var text = render(notification, title: title, body: body)
        var excess = text.utf8.count - maximumBytes
        if excess > 0 {
            body = cut(body, by: excess)
            text = render(notification, title: title, body: body)
            excess = text.utf8.count - maximumBytes
        }
        if excess > 0 {
            title = cut(title, by: excess)
            text = render(notification, title: title, body: body)
        }
        return Array(text.utf8)
    }

    /// Whether `encode` has to cut `notification` to fit.
    static func needsCut(_ notification: PushMessage) -> Bool {
        render(notification, title: notification.title, body: notification.body).utf8.count > maximumBytes
    }

    private static func render(_ notification: PushMessage, title: String, body: String) -> String {
        var aps = "\"alert\":{\"title\":\(JSONText.quoted(title)),\"body\":\(JSONText.quoted(body + notification.bodySuffix))}"
        aps += ",\"sound\":\"default\",\"interruption-level\":\"\(notification.interruptionLevel.rawValue)\""
        if let thread = notification.threadID { aps += ",\"thread-id\":\(JSONText.quoted(thread))" }
        if let badge = notification.badge { aps += ",\"badge\":\(badge)" }
        return "{\"aps\":{\(aps)}}"
    }

    /// `text` shortened by at least `excess` bytes of its JSON-escaped form, at a character boundary, plus `…`
    /// (or "" when even that does not fit).
    static func cut(_ text: String, by excess: Int) -> String {
        let budget = escapedSize(text) - excess - escapedSize(ellipsis)
        guard budget > 0 else { return "" }
        var used = 0
        var kept = ""
        for character in text {
            let size = escapedSize(String(character))
            if used + size > budget { break }
            used += size
            kept.append(character)
        }
        return kept + ellipsis
    }

    /// Bytes `text` takes inside a JSON string literal.
    static func escapedSize(_ text: String) -> Int { JSONText.quoted(text).utf8.count - 2 }
}
