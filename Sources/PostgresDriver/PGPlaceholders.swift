/// The parameters a statement sent unprepared takes (`PGConnection.rows(…, prepare: false)`), counted from its text
/// as the server will: the highest `$n` outside string literals, quoted identifiers, dollar-quoted bodies and
/// comments. A prepared statement's count comes from the server instead (`PQnparams`).
///
/// Why count at all: given fewer values than the text's highest `$n`, the server fails the Bind message with
/// SQLSTATE 08P01 (`protocol_violation`), whose class 08 reads as a lost connection (`PGError.isEnvironmental`):
/// a bug would be answered "try again later" for ever. Counted first, it is a plain misuse error naming the SQL.
package enum PGPlaceholders {
    package static func count(in sql: String) -> Int {
        let text = Array(sql.utf8)
        var highest = 0
        var index = 0
        func isWordByte(_ byte: UInt8) -> Bool {
            byte == UInt8(ascii: "_") || byte >= 0x80 || (byte | 0x20 >= UInt8(ascii: "a") && byte | 0x20 <= UInt8(ascii: "z"))
                || isDigit(byte)
        }
        func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }
        /// The index just past the first `terminator` at or after `from` (the text's end if there is none).
        func past(_ terminator: [UInt8], from: Int) -> Int {
            var at = from
            while at + terminator.count <= text.count {
                if text[at..<at + terminator.count].elementsEqual(terminator) { return at + terminator.count }
                at += 1
            }
            return text.count
        }
        while index < text.count {
            let byte = text[index]
            let next = index + 1 < text.count ? text[index + 1] : 0
            switch byte {
            case UInt8(ascii: "'"), UInt8(ascii: "\""):
                // A doubled quote inside is the quote itself: the literal goes on after it.
                index = past([byte], from: index + 1)
                while index < text.count, text[index] == byte { index = past([byte], from: index + 1) }
            case UInt8(ascii: "-") where next == UInt8(ascii: "-"):
                index = past([UInt8(ascii: "\n")], from: index + 2)
            case UInt8(ascii: "/") where next == UInt8(ascii: "*"):
                index = past(Array("*/".utf8), from: index + 2)
            case UInt8(ascii: "$") where index > 0 && isWordByte(text[index - 1]):
                index += 1  // inside an identifier such as `a$1`
            case UInt8(ascii: "$") where isDigit(next):
                var end = index + 1
                var number = 0
                while end < text.count, isDigit(text[end]) {
                    number = min(number * 10 + Int(text[end] - UInt8(ascii: "0")), 1 << 20)
                    end += 1
                }
                highest = max(highest, number)
                index = end
            case UInt8(ascii: "$"):
                // A dollar quote opens with `$tag$` (the tag may be empty) and ends at the same `$tag$`.
                var end = index + 1
                while end < text.count, isWordByte(text[end]) { end += 1 }
                if end < text.count, text[end] == UInt8(ascii: "$") {
                    index = past(Array(text[index...end]), from: end + 1)
                } else {
                    index = end
                }
            default:
                index += 1
            }
        }
        return highest
    }
}

extension PGError {
    /// A statement given more or fewer values than it has parameters (`PGConnection` checks before sending it).
    /// SQL's "using clause does not match dynamic parameter specifications": a bug in the caller, not the
    /// environment (`isEnvironmental` is false for it); PostgreSQL never sends it itself.
    package static let parameterCountMismatch = "07001"
}
