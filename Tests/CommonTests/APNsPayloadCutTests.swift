import Foundation
import Testing

@testable import Common

/// The cut that makes a push fit APNs' 4096 bytes, now one pass over the bytes: it must keep exactly what the
/// character-by-character cut kept (the longest run of whole characters whose escaped form fits, then `…`).
@Suite struct APNsPayloadCutTests {
    /// Text that puts character boundaries far from byte boundaries: emoji sequences, flags, combining marks, CRLF,
    /// escapes of one and five extra bytes, and three- and four-byte scalars.
    static let texts = [
        String(repeating: "🔴 line \"quoted\"\n", count: 40),
        String(repeating: "👨‍👩‍👧‍👦🇫🇷e\u{301}\r\n", count: 30),
        String(repeating: "a\u{1}\\b\tc", count: 60),
        String(repeating: "日本語テキスト", count: 40),
        String(repeating: "x", count: 300),
        // One character of two thousand combining marks between plain ones: rounding down inside it must stay linear.
        "ab" + "e" + String(repeating: "\u{301}", count: 2000) + "cd"
    ]

    @Test(arguments: texts) func theCutKeepsWhatTheCharacterByCharacterCutKept(_ text: String) {
        let size = APNsPayload.escapedSize(text)
        for excess in stride(from: 1, through: size + 4, by: 3) {
            #expect(APNsPayload.cut(text, by: excess) == Self.characterByCharacterCut(text, by: excess), "excess \(excess)")
        }
    }

    /// `TextCut.prefix` (stored messages, names, thread ids) rounds its budget down to a character boundary the same way:
    /// it keeps what appending whole characters while they fit kept.
    @Test(arguments: texts) func aPrefixKeepsTheWholeCharactersThatFit(_ text: String) {
        for budget in stride(from: 0, through: text.utf8.count + 2, by: 5) {
            var kept = ""
            for character in text {
                if kept.utf8.count + character.utf8.count > budget { break }
                kept.append(character)
            }
            #expect(TextCut.prefix(text, maxBytes: budget) == kept, "budget \(budget)")
        }
    }

    @Test func aFourKiBMessageIsCutToFitAndEndsOnAWholeCharacter() {
        let message = String(repeating: "é🔴x", count: 600)
        let bytes = APNsPayload.encode(PushMessage(title: "DB is down", body: message))
        #expect(bytes.count <= APNsPayload.maximumBytes && bytes.count > APNsPayload.maximumBytes - 8)
        let body = String(decoding: bytes, as: UTF8.self)
        #expect(body.contains("…\""))
    }

    /// The cut as it was written before (twenty-third session and earlier), kept here as the reference.
    static func characterByCharacterCut(_ text: String, by excess: Int) -> String {
        func size(_ text: String) -> Int { JSONText.quoted(text).utf8.count - 2 }
        let budget = size(text) - excess - size("…")
        guard budget > 0 else { return "" }
        var used = 0
        var kept = ""
        for character in text {
            let characterSize = size(String(character))
            if used + characterSize > budget { break }
            used += characterSize
            kept.append(character)
        }
        return kept + "…"
    }
}
