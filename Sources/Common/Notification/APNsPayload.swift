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
        var bytes = render(notification, title: title, body: body)
        var excess = bytes.count - maximumBytes
        if excess > 0 {
            body = cut(body, by: excess)
            bytes = render(notification, title: title, body: body)
            excess = bytes.count - maximumBytes
        }
        if excess > 0 {
            title = cut(title, by: excess)
            bytes = render(notification, title: title, body: body)
        }
        return bytes
    }

    /// Whether `encode` has to cut `notification` to fit.
    static func needsCut(_ notification: PushMessage) -> Bool {
        render(notification, title: notification.title, body: notification.body).count > maximumBytes
    }

    /// The payload's bytes, written into one buffer (once per push: the delivery path's hottest text). The fixed
    /// parts are copied as blocks and the badge written as digits: appending `String.UTF8View`s and interpolating
    /// the badge cost about 1,500 instructions a push (callgrind, nineteenth session).
    private static func render(_ notification: PushMessage, title: String, body: String) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(
            160 + title.utf8.count + body.utf8.count + notification.bodySuffix.utf8.count + (notification.threadID?.utf8.count ?? 0))
        JSONText.appendLiteral(#"{"aps":{"alert":{"title":"#, to: &out)
        JSONText.appendQuoted(title, to: &out)
        JSONText.appendLiteral(#","body":""#, to: &out)
        JSONText.appendEscaped(body, to: &out)
        JSONText.appendEscaped(notification.bodySuffix, to: &out)
        JSONText.appendLiteral(#""},"sound":"default","interruption-level":""#, to: &out)
        JSONText.appendUTF8(notification.interruptionLevel.rawValue, to: &out)
        out.append(UInt8(ascii: "\""))
        if let thread = notification.threadID {
            JSONText.appendLiteral(#","thread-id":"#, to: &out)
            JSONText.appendQuoted(thread, to: &out)
        }
        if let badge = notification.badge {
            JSONText.appendLiteral(#","badge":"#, to: &out)
            JSONText.appendDecimal(badge, to: &out)
        }
        JSONText.appendLiteral("}}", to: &out)
        return out
    }

    /// `text` shortened by at least `excess` bytes of its JSON-escaped form, at a character boundary, plus `…`
    /// (or "" when even that does not fit). One pass over the bytes, then back to the character boundary: sizing each
    /// character as a String of its own cost about 90 µs a kilobyte, and a 4 KiB message was cut on every push
    /// (twenty-fourth session: 407 µs of deliverer CPU a push of such messages).
    static func cut(_ text: String, by excess: Int) -> String {
        let budget = escapedSize(text) - excess - escapedSize(ellipsis)
        guard budget > 0 else { return "" }
        var text = text
        let fitting = text.withUTF8 { bytes in
            var used = 0
            for (offset, byte) in bytes.enumerated() {
                used += JSONText.escapedSize(of: byte)
                if used > budget { return offset }
            }
            return bytes.count
        }
        // The longest prefix within the budget may end inside a character (a multi-byte scalar, an emoji sequence):
        // it keeps only the characters it holds whole.
        let end = TextCut.characterStart(in: text, atOrBefore: text.utf8.index(text.utf8.startIndex, offsetBy: fitting))
        return String(text[..<end]) + ellipsis
    }

    /// Bytes `text` takes inside a JSON string literal.
    static func escapedSize(_ text: String) -> Int {
        var text = text
        return text.withUTF8 { bytes in bytes.reduce(0) { $0 + JSONText.escapedSize(of: $1) } }
    }
}
