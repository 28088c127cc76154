/// The statements both stores share (`SharedQueries`) are written with PostgreSQL's numbered, typed placeholders
/// (`$1::text`, which PostgreSQL needs to know a parameter's type); SQLite reads the same numbers as `?1`. This
/// rewrites one into the other: each `$N` outside string literals, quoted identifiers and comments, and not inside
/// a word (`a$1` is an identifier), becomes `?N`, its `::type` (or `::type[]`) dropped. Nothing else is changed: a
/// cast elsewhere fails to prepare, as SQLite has none, and a `$N` left behind would too (SQLite's `$name`
/// parameters are not used by the relay, so `SQLiteStatement`'s count check refuses the statement).
package enum SQLitePlaceholders {
    package static func numbered(_ sql: String) -> String {
        let text = Array(sql.utf8)
        var result: [UInt8] = []
        result.reserveCapacity(text.count)
        var index = 0
        func isDigit(_ at: Int) -> Bool { at < text.count && text[at] >= UInt8(ascii: "0") && text[at] <= UInt8(ascii: "9") }
        func isWordByte(_ at: Int) -> Bool {
            at >= 0 && at < text.count
                && (text[at] == UInt8(ascii: "_") || text[at] >= 0x80 || isDigit(at)
                    || (text[at] | 0x20 >= UInt8(ascii: "a") && text[at] | 0x20 <= UInt8(ascii: "z")))
        }
        /// Copies from `index` to just past `terminator` (the text's end if there is none) unchanged.
        func copyPast(_ terminator: [UInt8], from start: Int) {
            var end = start
            while end + terminator.count <= text.count, !text[end..<end + terminator.count].elementsEqual(terminator) { end += 1 }
            end = min(text.count, end + terminator.count)
            result += text[index..<end]
            index = end
        }
        while index < text.count {
            let byte = text[index]
            let next = index + 1 < text.count ? text[index + 1] : 0
            switch byte {
            case UInt8(ascii: "'"), UInt8(ascii: "\""):
                // A doubled quote inside is the quote itself: the literal or identifier goes on after it.
                copyPast([byte], from: index + 1)
                while index < text.count, text[index] == byte { copyPast([byte], from: index + 1) }
            case UInt8(ascii: "-") where next == UInt8(ascii: "-"):
                copyPast([UInt8(ascii: "\n")], from: index + 2)
            case UInt8(ascii: "/") where next == UInt8(ascii: "*"):
                copyPast(Array("*/".utf8), from: index + 2)
            case UInt8(ascii: "$") where isDigit(index + 1) && !isWordByte(index - 1):
                result.append(UInt8(ascii: "?"))
                index += 1
                while isDigit(index) {
                    result.append(text[index])
                    index += 1
                }
                if index + 1 < text.count, text[index] == UInt8(ascii: ":"), text[index + 1] == UInt8(ascii: ":") {
                    index += 2
                    while isWordByte(index) { index += 1 }
                    if index + 1 < text.count, text[index] == UInt8(ascii: "["), text[index + 1] == UInt8(ascii: "]") { index += 2 }
                }
            default:
                result.append(byte)
                index += 1
            }
        }
        return String(decoding: result, as: UTF8.self)
    }
}
