/// Cutting text to a byte budget without splitting a character (names kept in folded alerts, thread ids).
public enum TextCut {
    /// The longest prefix of `text` whose UTF-8 form fits in `maxBytes`, ending on a character boundary.
    /// Rounds the byte budget down to a character boundary, as `APNsPayload.cut` does, instead of appending characters
    /// one by one (which measured no slower in ingest: 230–250 µs of CPU a webhook of a 50 KB message either way).
    public static func prefix(_ text: String, maxBytes: Int) -> String {
        guard text.utf8.count > maxBytes else { return text }
        var end = text.utf8.index(text.utf8.startIndex, offsetBy: max(0, maxBytes))
        while end > text.startIndex, end.samePosition(in: text) == nil { end = text.utf8.index(before: end) }
        return String(text[..<end])
    }
}
