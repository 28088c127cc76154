/// Reads JSON as an unescaping template writes it (SPEC §2.2, "Custom bodies as users really write them").
///
/// Uptime Kuma renders custom bodies with Liquid and does not escape, so `{"title":"{{name}}","body":"{{msg}}"}`
/// becomes `{"title":"NAS","body":"PING 10.0.0.7 …<newline>--- statistics ---"}` or holds a quote in the middle of a
/// string (`…keyword is not in [<html lang="en">…]`). This parser is the strict grammar with three tolerances, all
/// inside string literals:
/// - raw control characters (newline, tab, CR…) are taken literally;
/// - a `"` ends the string only where the structure after it says so (a key is followed by `:`; a value by `}` or
///   by `,` and the next key; an element by `]` or by `,` and the next value; a lone top-level string by the end).
///   Any other `"` is text. Where several quotes could end one of the top level's string values (a message
///   holding `[{"status":"error","db":"down"}]` before the template's own `"}`), the ways of ending them that make a
///   whole document are searched (`search`: at most `searchRuns` parses a pass, `searchBytes` read by both) and the caller's
///   `preference` picks one; ties go to the parse that ends strings earliest. A search cut short reads as its first
///   parse. Keys, and strings nested deeper, end at their first possible quote;
/// - an escape that is not JSON (`C:\path`) keeps its backslash as text; and when a document does not parse
///   otherwise, a second pass takes a `\"` whose quote can end the string as a backslash that ends the text
///   (a message ending in `\` right before the template's closing quote).
///
/// It is never used where the strict `JSONParser` succeeded, and it guards what strictness protects: input must be
/// valid UTF-8 (checked here) and nesting is capped at `JSONParser.maximumDepth`. Returns nil for anything else.
public struct TolerantJSONParser {
    private enum Place { case key, objectValue, arrayElement, topLevel }
    private struct Failure: Error {}

    /// The document, valid only during `search` (which keeps the array alive around its parses). A buffer, not the
    /// array: every read of a stored array retains and releases it in a debug build, a quarter of a parse's time.
    private let bytes: UnsafeBufferPointer<UInt8>
    private var index = 0
    private var depth = 0
    /// The second pass: a backslash before a quote that can end the string is text.
    private let trailingBackslashes: Bool
    /// For each string literal in document order, how many quotes that could end it are taken as text first (the
    /// search's position; missing entries are 0), and what this parse took.
    private let skips: [Int]
    private var taken: [Int] = []
    /// One for each byte a loop of this parse visits (looking ahead after a quote included): what the tests count to
    /// hold the search to a bounded multiple of the input, without a clock (`ParserWorkTests` in IngestTests).
    private var steps = 0

    /// Parses of one document per pass at most, and bytes read by all parses of both passes (the second pass gets
    /// what the first left, and at least one parse): each parse is linear in the document's length, so a body built
    /// to make the search branch costs a bounded multiple of reading it. 256 KiB keeps all 64 parses of both passes
    /// for bodies up to 2 KiB (a rendered template with a long ping or keyword message is under that), and holds a
    /// 64 KiB body built to branch to five parses, about ten times the CPU of a plain 64 KiB alert
    /// (`ParserWorkTests`, `test_hostile_bodies.py`; 1 MiB a pass let such a body cost twenty).
    static let searchRuns = 64
    static let searchBytes = 256 << 10

    /// - Parameter preference: a score for each whole document found; the highest wins, and among equals the one
    ///   found first (by default all are equal: the parse that ends each string at its first possible quote).
    public static func parse(_ bytes: [UInt8], preference: (JSONValue) -> Int = { _ in 0 }) -> JSONValue? {
        var steps = 0
        return parse(bytes, preference: preference, steps: &steps)
    }

    /// `parse(_:preference:)`, adding to `steps` the bytes its loops visited over every parse of the search (and one
    /// read to validate the UTF-8); the preference's own work is the caller's.
    package static func parse(_ bytes: [UInt8], preference: (JSONValue) -> Int = { _ in 0 }, steps: inout Int) -> JSONValue? {
        steps += bytes.count
        guard String(validating: bytes, as: UTF8.self) != nil else { return nil }
        var budget = searchBytes
        return search(bytes, trailingBackslashes: false, preference, &budget, &steps)
            ?? search(bytes, trailingBackslashes: true, preference, &budget, &steps)
    }

    /// Depth first over the choice of quote that ends each string value of the top level (the template's own
    /// members; what a `| json` filter wrote inside them is valid JSON and ends at its first possible quote): after
    /// each parse, whole or failed, the last string it ended moves to its next possible end (the choices after it
    /// start again from the first). When the choices run out the best reading wins. When the budget runs out
    /// first, the reading is the first parse's (each string ended at its first possible quote), or none: what the
    /// relay read before it searched, never a reading picked from a search cut short. `budget`: the bytes the
    /// search may still read, less what this pass read when it returns.
    private static func search(
        _ bytes: [UInt8], trailingBackslashes: Bool, _ preference: (JSONValue) -> Int, _ budget: inout Int, _ steps: inout Int
    ) -> JSONValue? {
        var skips: [Int] = []
        var first: JSONValue?
        var best: (value: JSONValue, score: Int)?
        let runs = max(1, min(searchRuns, budget / max(bytes.count, 1)))
        for run in 0..<runs {
            budget -= bytes.count
            let (value, taken, visited) = bytes.withUnsafeBufferPointer { buffer in
                var parser = TolerantJSONParser(bytes: buffer, trailingBackslashes: trailingBackslashes, skips: skips)
                return (parser.parseDocument(), parser.taken, parser.steps)
            }
            steps += visited
            if run == 0 { first = value }
            if let value {
                let score = preference(value)
                if best == nil || score > best!.score { best = (value, score) }
            }
            guard !taken.isEmpty else { return best?.value }
            skips = taken
            skips[skips.count - 1] += 1
        }
        return first
    }

    private init(bytes: UnsafeBufferPointer<UInt8>, trailingBackslashes: Bool, skips: [Int]) {
        self.bytes = bytes
        self.trailingBackslashes = trailingBackslashes
        self.skips = skips
    }

    private mutating func parseDocument() -> JSONValue? {
        do {
            skipWhitespace()
            let value = try parseValue(.topLevel)
            skipWhitespace()
            return index == bytes.count ? value : nil
        } catch {
            return nil
        }
    }

    private static func isWhitespace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x0a || byte == 0x0d || byte == 0x09 }

    /// `,` `}` `]` `:`: what ends a number or literal. Compared one by one, never as an array literal, which a debug
    /// build allocates for every byte (most of a 64 KiB token's cost, measured with perf).
    private static func isPunctuation(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: ",") || byte == UInt8(ascii: "}") || byte == UInt8(ascii: "]") || byte == UInt8(ascii: ":")
    }

    private mutating func skipWhitespace() {
        while index < bytes.count, Self.isWhitespace(bytes[index]) {
            steps += 1
            index += 1
        }
    }

    /// The first non-whitespace index at or after `from` (bytes.count when none).
    private mutating func nextSignificant(_ from: Int) -> Int {
        var i = from
        while i < bytes.count, Self.isWhitespace(bytes[i]) { i += 1 }
        steps += i - from + 1
        return i
    }

    private mutating func parseValue(_ place: Place) throws(Failure) -> JSONValue {
        guard index < bytes.count else { throw Failure() }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try parseObject()
        case UInt8(ascii: "["): return try parseArray()
        case UInt8(ascii: "\""): return .string(try parseString(place))
        default:
            // Numbers and literals: exactly as JSON writes them, checked by the strict parser on the token alone.
            let start = index
            while index < bytes.count, !Self.isWhitespace(bytes[index]), !Self.isPunctuation(bytes[index]) {
                steps += 1
                index += 1
            }
            // The strict parser reads the token once more.
            steps += index - start
            guard index > start, let value = try? JSONParser.parse(Array(bytes[start..<index])),
                !value.isObject, value.stringValue == nil
            else { throw Failure() }
            return value
        }
    }

    private mutating func enter() throws(Failure) {
        depth += 1
        guard depth <= JSONParser.maximumDepth else { throw Failure() }
    }

    private mutating func parseObject() throws(Failure) -> JSONValue {
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
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw Failure() }
            let key = try parseString(.key)
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw Failure() }
            index += 1
            skipWhitespace()
            members.append((key, try parseValue(.objectValue)))
            if try closes(with: UInt8(ascii: "}")) { return .object(members) }
        }
    }

    private mutating func parseArray() throws(Failure) -> JSONValue {
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
            elements.append(try parseValue(.arrayElement))
            if try closes(with: UInt8(ascii: "]")) { return .array(elements) }
        }
    }

    private mutating func closes(with closer: UInt8) throws(Failure) -> Bool {
        skipWhitespace()
        guard index < bytes.count else { throw Failure() }
        if bytes[index] == UInt8(ascii: ",") {
            index += 1
            return false
        }
        guard bytes[index] == closer else { throw Failure() }
        index += 1
        return true
    }

    /// A string literal, opening quote at `index`; see the type's comment for what is taken as text. A value ends
    /// at the first quote that can end it after the number of such quotes the search says to skip; a key at the
    /// first (keys are the template's own text, and a key moved past its quote made objects out of anything).
    private mutating func parseString(_ place: Place) throws(Failure) -> String {
        index += 1
        var out: [UInt8] = []
        let isChoice = place != .key && depth <= 1
        let skip = isChoice && taken.count < skips.count ? skips[taken.count] : 0
        var skipped = 0
        while index < bytes.count {
            steps += 1
            let byte = bytes[index]
            if byte == UInt8(ascii: "\""), endsString(quoteAt: index, place) {
                if skipped == skip {
                    index += 1
                    if isChoice { taken.append(skip) }
                    // Only ASCII bytes were split on, so `out` is valid UTF-8 because the input is.
                    return String(decoding: out, as: UTF8.self)
                }
                skipped += 1
            }
            if byte == UInt8(ascii: "\\"), trailingBackslashes, index + 1 < bytes.count, bytes[index + 1] == UInt8(ascii: "\""),
                endsString(quoteAt: index + 1, place)
            {
                out.append(byte)
                index += 1
                continue
            }
            if byte == UInt8(ascii: "\\"), let decoded = escape(at: index) {
                out.append(contentsOf: decoded.bytes)
                index += decoded.length
                continue
            }
            out.append(byte)
            index += 1
        }
        throw Failure()
    }

    /// Whether the quote at `quote` can end a string in `place`: what follows it must be what JSON allows there.
    private mutating func endsString(quoteAt quote: Int, _ place: Place) -> Bool {
        let next = nextSignificant(quote + 1)
        let byte = next < bytes.count ? bytes[next] : nil
        switch place {
        case .topLevel:
            return byte == nil
        case .key:
            return byte == UInt8(ascii: ":")
        case .objectValue:
            if byte == UInt8(ascii: "}") { return closesContainer(at: next) }
            return byte == UInt8(ascii: ",") && keyFollows(after: next)
        case .arrayElement:
            if byte == UInt8(ascii: "]") { return closesContainer(at: next) }
            guard byte == UInt8(ascii: ",") else { return false }
            let start = nextSignificant(next + 1)
            guard start < bytes.count else { return false }
            switch bytes[start] {
            case UInt8(ascii: "\""), UInt8(ascii: "{"), UInt8(ascii: "["), UInt8(ascii: "-"), UInt8(ascii: "t"), UInt8(ascii: "f"),
                UInt8(ascii: "n"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                return true
            default: return false
            }
        }
    }

    /// A `}` or `]` at `closer` ends a container when what follows it is the end or more structure.
    private mutating func closesContainer(at closer: Int) -> Bool {
        let next = nextSignificant(closer + 1)
        guard next < bytes.count else { return true }
        return bytes[next] != UInt8(ascii: ":") && Self.isPunctuation(bytes[next])
    }

    /// After the `,` at `comma`: a key, i.e. `"name"` (no quote or backslash inside) followed by `:`.
    private mutating func keyFollows(after comma: Int) -> Bool {
        var i = nextSignificant(comma + 1)
        guard i < bytes.count, bytes[i] == UInt8(ascii: "\"") else { return false }
        i += 1
        while i < bytes.count, bytes[i] != UInt8(ascii: "\"") {
            steps += 1
            if bytes[i] == UInt8(ascii: "\\") || bytes[i] < 0x20 { return false }
            i += 1
        }
        let colon = nextSignificant(i + 1)
        return i < bytes.count && colon < bytes.count && bytes[colon] == UInt8(ascii: ":")
    }

    /// A JSON escape at `at` (its bytes and its length), or nil when it is not one and the backslash is text.
    private func escape(at start: Int) -> (bytes: [UInt8], length: Int)? {
        guard start + 1 < bytes.count else { return nil }
        switch bytes[start + 1] {
        case UInt8(ascii: "\""): return ([0x22], 2)
        case UInt8(ascii: "\\"): return ([0x5c], 2)
        case UInt8(ascii: "/"): return ([0x2f], 2)
        case UInt8(ascii: "b"): return ([0x08], 2)
        case UInt8(ascii: "f"): return ([0x0c], 2)
        case UInt8(ascii: "n"): return ([0x0a], 2)
        case UInt8(ascii: "r"): return ([0x0d], 2)
        case UInt8(ascii: "t"): return ([0x09], 2)
        case UInt8(ascii: "u"):
            guard let high = hex4(at: start + 2) else { return nil }
            var scalar = high
            var length = 6
            if (0xD800...0xDBFF).contains(high) {
                guard start + 7 < bytes.count, bytes[start + 6] == UInt8(ascii: "\\"), bytes[start + 7] == UInt8(ascii: "u"),
                    let low = hex4(at: start + 8), (0xDC00...0xDFFF).contains(low)
                else { return nil }
                scalar = 0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)
                length = 12
            }
            guard let unicode = Unicode.Scalar(scalar) else { return nil }
            return (Array(String(Character(unicode)).utf8), length)
        default:
            return nil
        }
    }

    private func hex4(at start: Int) -> UInt32? {
        guard start + 4 <= bytes.count else { return nil }
        var value: UInt32 = 0
        for byte in bytes[start..<(start + 4)] {
            guard let digit = Character(Unicode.Scalar(byte)).hexDigitValue else { return nil }
            value = value << 4 | UInt32(digit)
        }
        return value
    }
}
