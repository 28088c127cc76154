/// The statements both stores share (`SharedQueries`) are written with PostgreSQL's numbered, typed placeholders
/// (`$1::text`, which PostgreSQL needs to know a parameter's type); SQLite reads the same numbers as `?1`. This
/// rewrites one into the other: each `$N` outside a string literal becomes `?N`, its `::type` (or `::type[]`)
/// dropped. Nothing else is changed: a cast elsewhere fails to prepare, as SQLite has none.
enum SQLitePlaceholders {
    static func numbered(_ sql: String) -> String {
        let text = Array(sql.utf8)
        var result: [UInt8] = []
        result.reserveCapacity(text.count)
        var index = 0
        func isDigit(_ at: Int) -> Bool { at < text.count && text[at] >= UInt8(ascii: "0") && text[at] <= UInt8(ascii: "9") }
        func isWordByte(_ at: Int) -> Bool {
            at < text.count
                && (text[at] == UInt8(ascii: "_") || isDigit(at) || (text[at] | 0x20 >= UInt8(ascii: "a") && text[at] | 0x20 <= UInt8(ascii: "z")))
        }
        while index < text.count {
            let byte = text[index]
            if byte == UInt8(ascii: "'") {
                // A literal, copied whole; a doubled quote inside is the quote itself, and the literal goes on.
                var end = index + 1
                while end < text.count, text[end] != byte || (end + 1 < text.count && text[end + 1] == byte) {
                    end += text[end] == byte ? 2 : 1
                }
                result += text[index..<min(end + 1, text.count)]
                index = end + 1
            } else if byte == UInt8(ascii: "$"), isDigit(index + 1) {
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
            } else {
                result.append(byte)
                index += 1
            }
        }
        return String(decoding: result, as: UTF8.self)
    }
}
