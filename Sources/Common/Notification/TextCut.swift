/// Cutting text to a byte budget without splitting a character (names kept in folded alerts, thread ids).
public enum TextCut {
    /// The longest prefix of `text` whose UTF-8 form fits in `maxBytes`, ending on a character boundary.
    public static func prefix(_ text: String, maxBytes: Int) -> String {
        guard text.utf8.count > maxBytes else { return text }
        var kept = ""
        var used = 0
        for character in text {
            let size = character.utf8.count
            if used + size > maxBytes { break }
            used += size
            kept.append(character)
        }
        return kept
    }
}
