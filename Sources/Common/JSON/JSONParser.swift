/// A strict RFC 8259 JSON parser over UTF-8 bytes.
///
/// Foundation's JSONSerialization spent most of ingest's time in parsing and in bridging its result to Swift
/// dictionaries (measured with perf; see docs/performance.md). This parser builds plain Swift values, validates
/// UTF-8, escapes and number syntax, and refuses nesting deeper than `maximumDepth` so hostile input cannot
/// exhaust the stack.
public struct JSONParser {
    public struct SyntaxError: Error, Equatable, CustomStringConvertible {
        public let offset: Int
        public let reason: String
        public var description: String { "invalid JSON at byte \(offset): \(reason)" }
    }

    public static let maximumDepth = 64

    /// The document, valid only during `parse` (which keeps the array alive around the whole run).
    private let bytes: UnsafeBufferPointer<UInt8>
    private var index = 0
    private var depth = 0
    /// When set, object members with other keys are validated but not kept (webhooks carry ~60 monitor fields
    /// of which the relay reads two). Compared as raw bytes, so a dropped key never becomes a String.
    private var keeping: KeptKeys?
    /// Bytes visited, added once per loop (never per byte, to keep the loops as measured): the tests hold the parse
    /// linear by this count, without a clock (`ParserWorkTests` in IngestTests).
    private var steps = 0

    /// The member names a parse keeps, as bytes, prepared once (a webhook parse used to convert its set of names
    /// for every request).
    public struct KeptKeys: Sendable {
        let names: [[UInt8]]
        /// One bit per kept name, chosen by its length and first byte: most dropped keys (a webhook has ~70, of
        /// common lengths) find their bit clear and are turned away before any comparison.
        let filter: UInt64

        public init(_ names: some Sequence<String>) {
            self.names = Set(names).map { Array($0.utf8) }
            filter = self.names.reduce(0) { $0 | Self.bit($1.count, $1.first ?? 0) }
        }

        static func bit(_ length: Int, _ first: UInt8) -> UInt64 { 1 << UInt64((length &* 31 &+ Int(first)) & 63) }

        func contains(_ key: UnsafeRawBufferPointer) -> Bool {
            let first = key.first ?? 0
            guard filter & Self.bit(key.count, first) != 0 else { return false }
            return names.contains { name in name.count == key.count && name.withUnsafeBytes { $0.elementsEqual(key) } }
        }
    }

    /// Parses a whole document (surrounding whitespace allowed, nothing else). With `keeping`, only members whose
    /// key is in the set are materialised, at every depth; the rest is still fully validated.
    public static func parse(_ bytes: [UInt8], keeping: Set<String>? = nil) throws(SyntaxError) -> JSONValue {
        try parse(bytes, keeping: keeping.map { KeptKeys($0) })
    }

    /// `parse(_:keeping:)` with the kept names prepared beforehand.
    public static func parse(_ bytes: [UInt8], keeping: KeptKeys?) throws(SyntaxError) -> JSONValue {
        var steps = 0
        return try parse(bytes, keeping: keeping, steps: &steps)
    }

    /// `parse(_:keeping:)`, adding to `steps` the bytes the parse visited (reads again included).
    package static func parse(_ bytes: [UInt8], keeping: KeptKeys?, steps: inout Int) throws(SyntaxError) -> JSONValue {
        let result: Result<JSONValue, SyntaxError> = bytes.withUnsafeBufferPointer { buffer in
            var parser = JSONParser(bytes: buffer)
            parser.keeping = keeping
            defer { steps += parser.steps }
            do throws(SyntaxError) {
                parser.skipWhitespace()
                let value = try parser.parseValue()
                parser.skipWhitespace()
                guard parser.index == buffer.count else { throw parser.error("trailing characters") }
                return .success(value)
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }

    private init(bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

    private func error(_ reason: String) -> SyntaxError { SyntaxError(offset: index, reason: reason) }

    // The byte loops below scan with a local index and store it once: advancing the stored `index` byte by byte
    // kept it in memory (about twice the instructions per byte, measured with callgrind).
    private mutating func skipWhitespace() {
        var at = index
        while at < bytes.count, bytes[at] == 0x20 || bytes[at] == 0x0a || bytes[at] == 0x0d || bytes[at] == 0x09 { at += 1 }
        steps += at - index
        index = at
    }

    private mutating func parseValue() throws(SyntaxError) -> JSONValue {
        guard index < bytes.count else { throw error("unexpected end") }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try parseObject()
        case UInt8(ascii: "["): return try parseArray()
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"):
            try literal("true")
            return .bool(true)
        case UInt8(ascii: "f"):
            try literal("false")
            return .bool(false)
        case UInt8(ascii: "n"):
            try literal("null")
            return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number(try parseNumber())
        default: throw error("unexpected character")
        }
    }

    private mutating func literal(_ word: StaticString) throws(SyntaxError) {
        let length = word.utf8CodeUnitCount
        guard index + length <= bytes.count else { throw error("unexpected end") }
        for offset in 0..<length where bytes[index + offset] != word.utf8Start[offset] {
            throw error("invalid literal")
        }
        index += length
    }

    private mutating func enter() throws(SyntaxError) {
        depth += 1
        guard depth <= Self.maximumDepth else { throw error("nested deeper than \(Self.maximumDepth)") }
    }

    private mutating func parseObject() throws(SyntaxError) -> JSONValue {
        try enter()
        defer { depth -= 1 }
        index += 1
        var members: [(key: String, value: JSONValue)] = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
            index += 1
            return .object(members)
        }
        while true {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw error("expected a key") }
            let keyStart = index + 1
            let keep = try keyIsKept()
            let key = keep ? try keyString(from: keyStart) : ""
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw error("expected ':'") }
            index += 1
            skipWhitespace()
            if keep {
                members.append((key, try parseValue()))
            } else {
                try skipValue()
            }
            if try closes(with: "}") { return .object(members) }
        }
    }

    private mutating func parseArray() throws(SyntaxError) -> JSONValue {
        try enter()
        defer { depth -= 1 }
        index += 1
        var elements: [JSONValue] = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
            index += 1
            return .array(elements)
        }
        while true {
            skipWhitespace()
            elements.append(try parseValue())
            if try closes(with: "]") { return .array(elements) }
        }
    }

    /// After a member or element: consumes `,` (false: another follows) or `closer` (true: the container ends).
    private mutating func closes(with closer: Unicode.Scalar) throws(SyntaxError) -> Bool {
        skipWhitespace()
        guard index < bytes.count else { throw error("unexpected end") }
        switch bytes[index] {
        case UInt8(ascii: ","):
            index += 1
            return false
        case UInt8(ascii: closer):
            index += 1
            return true
        default:
            throw error("expected ',' or '\(closer)'")
        }
    }

    /// Reads past the key at `index` and says whether its member is kept. Keys with escapes are decoded to compare.
    private mutating func keyIsKept() throws(SyntaxError) -> Bool {
        let start = index + 1
        let escaped = try skipString()
        guard let keeping else { return true }
        if escaped {
            var probe = self
            probe.index = start - 1
            defer { steps = probe.steps }
            return Array(try probe.parseString().utf8).withUnsafeBytes { keeping.contains($0) }
        }
        steps += index - start
        return keeping.contains(UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: bytes[start..<(index - 1)])))
    }

    /// The key string whose opening quote preceded `start` (already validated by `keyIsKept`).
    private mutating func keyString(from start: Int) throws(SyntaxError) -> String {
        var probe = self
        probe.index = start - 1
        probe.keeping = nil
        defer { steps = probe.steps }
        return try probe.parseString()
    }

    /// Validates one value without building it: a dropped member costs no allocation (webhooks carry ~60 monitor
    /// fields, arrays and numbers among them, of which the relay reads a few).
    private mutating func skipValue() throws(SyntaxError) {
        guard index < bytes.count else { throw error("unexpected end") }
        switch bytes[index] {
        case UInt8(ascii: "{"): try skipContainer(closer: "}", members: true)
        case UInt8(ascii: "["): try skipContainer(closer: "]", members: false)
        case UInt8(ascii: "\""): try skipString()
        case UInt8(ascii: "t"): try literal("true")
        case UInt8(ascii: "f"): try literal("false")
        case UInt8(ascii: "n"): try literal("null")
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): try skipNumber()
        default: throw error("unexpected character")
        }
    }

    /// An object (`members`: each element is `"key": value`) or an array, validated as `parseObject` and
    /// `parseArray` would, nesting limit included.
    private mutating func skipContainer(closer: Unicode.Scalar, members: Bool) throws(SyntaxError) {
        try enter()
        defer { depth -= 1 }
        index += 1
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: closer) {
            index += 1
            return
        }
        while true {
            skipWhitespace()
            if members {
                guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw error("expected a key") }
                try skipString()
                skipWhitespace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw error("expected ':'") }
                index += 1
                skipWhitespace()
            }
            try skipValue()
            if try closes(with: closer) { return }
        }
    }

    /// Validates a string (escapes and UTF-8) without building it; true when it holds an escape.
    @discardableResult
    private mutating func skipString() throws(SyntaxError) -> Bool {
        let start = index + 1
        guard let (quote, combined) = plainStringEnd(from: start) else {
            // An escape (or a control character, which parseString refuses): the full decoder checks it.
            _ = try parseString()
            return true
        }
        if combined >= 0x80 { steps += quote - start }
        if combined >= 0x80, !Self.isValidUTF8(UnsafeBufferPointer(rebasing: bytes[start..<quote])) {
            index = quote
            throw error("invalid UTF-8 in string")
        }
        index = quote + 1
        return false
    }

    /// The closing quote of the string whose text starts at `start`, with the OR of its bytes (0x80 set: not
    /// ASCII, to be validated), when the text holds no escape and no control character; nil otherwise.
    private mutating func plainStringEnd(from start: Int) -> (quote: Int, combined: UInt8)? {
        var at = start
        var combined: UInt8 = 0
        defer { steps += at - start + 1 }
        while at < bytes.count {
            let byte = bytes[at]
            if byte == UInt8(ascii: "\"") { return (at, combined) }
            if byte == UInt8(ascii: "\\") || byte < 0x20 { return nil }
            combined |= byte
            at += 1
        }
        return nil
    }

    /// RFC 3629 UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF.
    static func isValidUTF8(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        var i = 0
        while i < bytes.count {
            let b0 = bytes[i]
            if b0 < 0x80 {
                i += 1
                continue
            }
            let length: Int
            var low: UInt8 = 0x80
            var high: UInt8 = 0xBF
            switch b0 {
            case 0xC2...0xDF: length = 2
            case 0xE0:
                length = 3
                low = 0xA0
            case 0xE1...0xEC, 0xEE...0xEF: length = 3
            case 0xED:
                length = 3
                high = 0x9F
            case 0xF0:
                length = 4
                low = 0x90
            case 0xF1...0xF3: length = 4
            case 0xF4:
                length = 4
                high = 0x8F
            default: return false
            }
            guard i + length <= bytes.count, (low...high).contains(bytes[i + 1]) else { return false }
            for k in 2..<length where !(0x80...0xBF).contains(bytes[i + k]) { return false }
            i += length
        }
        return true
    }

    private mutating func parseNumber() throws(SyntaxError) -> String {
        let start = index
        try skipNumber()
        return String(decoding: bytes[start..<index], as: UTF8.self)
    }

    /// Reads past a number, checking RFC 8259's grammar (no leading zeros, digits after '.' and 'e').
    private mutating func skipNumber() throws(SyntaxError) {
        let start = index
        defer { steps += index - start + 1 }
        if bytes[index] == UInt8(ascii: "-") { index += 1 }
        guard index < bytes.count, isDigit(bytes[index]) else { throw error("invalid number") }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
        } else {
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            index += 1
            guard index < bytes.count, isDigit(bytes[index]) else { throw error("invalid fraction") }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
            guard index < bytes.count, isDigit(bytes[index]) else { throw error("invalid exponent") }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
    }

    private func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }

    /// A string literal, opening quote at `index`. The common case — no escapes — becomes a String straight from
    /// the input bytes (ASCII needs no validation; other text is validated once).
    private mutating func parseString() throws(SyntaxError) -> String {
        let start = index + 1
        guard let (quote, combined) = plainStringEnd(from: start) else {
            index = start
            return try parseEscapedString()
        }
        let run = UnsafeBufferPointer(rebasing: bytes[start..<quote])
        index = quote + 1
        // Made into a String: read once more.
        steps += run.count
        if combined < 0x80 { return String(decoding: run, as: UTF8.self) }
        guard let text = String(validating: run, as: UTF8.self) else { throw error("invalid UTF-8 in string") }
        return text
    }

    /// The slow path: a string with escapes, assembled into a byte buffer and validated.
    private mutating func parseEscapedString() throws(SyntaxError) -> String {
        let entry = index
        // Each byte is read, copied into `out`, and validated there: three visits.
        defer { steps += 3 * (index - entry) }
        var out: [UInt8] = []
        var runStart = index
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                out.append(contentsOf: bytes[runStart..<index])
                index += 1
                guard let text = String(validating: out, as: UTF8.self) else { throw error("invalid UTF-8 in string") }
                return text
            } else if byte == UInt8(ascii: "\\") {
                out.append(contentsOf: bytes[runStart..<index])
                index += 1
                try parseEscape(into: &out)
                runStart = index
            } else if byte < 0x20 {
                throw error("control character in string")
            } else {
                index += 1
            }
        }
        throw error("unterminated string")
    }

    private mutating func parseEscape(into out: inout [UInt8]) throws(SyntaxError) {
        guard index < bytes.count else { throw error("unterminated escape") }
        let escape = bytes[index]
        index += 1
        switch escape {
        case UInt8(ascii: "\""): out.append(0x22)
        case UInt8(ascii: "\\"): out.append(0x5c)
        case UInt8(ascii: "/"): out.append(0x2f)
        case UInt8(ascii: "b"): out.append(0x08)
        case UInt8(ascii: "f"): out.append(0x0c)
        case UInt8(ascii: "n"): out.append(0x0a)
        case UInt8(ascii: "r"): out.append(0x0d)
        case UInt8(ascii: "t"): out.append(0x09)
        case UInt8(ascii: "u"):
            var scalar = try hex4()
            if (0xD800...0xDBFF).contains(scalar), let low = try escapedLowSurrogate() {
                scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
            } else if (0xD800...0xDFFF).contains(scalar) {
                // Half of a pair, alone: JavaScript cut a string between the two halves of an emoji (Uptime Kuma's
                // keyword monitor quotes the page's first 47 UTF-16 units) and JSON.stringify escaped what was
                // left. RFC 8259 allows it; it has no UTF-8 form, so it reads as U+FFFD, as Node's own decoding does.
                scalar = 0xFFFD
            }
            guard let unicode = Unicode.Scalar(scalar) else { throw error("invalid code point") }
            out.append(contentsOf: Array(String(Character(unicode)).utf8))
        default:
            throw error("invalid escape")
        }
    }

    /// The `\uDC00`–`\uDFFF` escape that follows, consumed; nil (nothing consumed) when the next is anything else.
    private mutating func escapedLowSurrogate() throws(SyntaxError) -> UInt32? {
        guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else {
            return nil
        }
        let start = index
        index += 2
        let low = try hex4()
        guard (0xDC00...0xDFFF).contains(low) else {
            index = start
            return nil
        }
        return low
    }

    private mutating func hex4() throws(SyntaxError) -> UInt32 {
        guard index + 4 <= bytes.count else { throw error("short \\u escape") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            let digit: UInt32
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
            default: throw error("invalid \\u escape")
            }
            value = value << 4 | digit
            index += 1
        }
        return value
    }
}
