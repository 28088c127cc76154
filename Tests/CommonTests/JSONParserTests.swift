import Common
import Foundation
import Testing

@Suite struct JSONParserTests {
    func parse(_ text: String) throws -> JSONValue { try JSONParser.parse(Array(text.utf8)) }

    @Test func parsesEveryKindOfValue() throws {
        let value = try parse(#" {"a": [1, -2.5e3, true, false, null], "b": {"c": "d"}, "e": "", "f": 0} "#)
        #expect(value["a"] == .array([.number("1"), .number("-2.5e3"), .bool(true), .bool(false), .null]))
        #expect(value["b"]?["c"]?.stringValue == "d")
        #expect(value["e"]?.stringValue == "" && value["f"]?.intValue == 0)
        #expect(value["missing"] == nil)
    }

    @Test func decodesEscapesSurrogatePairsAndRawUTF8() throws {
        let value = try parse(#"["a\"b\\c\/d\b\f\n\r\t", "\u00e9\ud83d\udd34", "é🔴"]"#)
        #expect(value == .array([.string("a\"b\\c/d\u{8}\u{c}\n\r\t"), .string("é🔴"), .string("é🔴")]))
    }

    @Test func laterDuplicateKeysWin() throws {
        #expect(try parse(#"{"a":1,"a":2}"#)["a"]?.intValue == 2)
    }

    /// Half of a surrogate pair, alone, is what JSON.stringify writes for a JavaScript string cut between the two
    /// halves of an emoji — Uptime Kuma's keyword monitor quotes the page's first 47 UTF-16 units. RFC 8259 allows
    /// it; it reads as U+FFFD (refused, it lost the whole DOWN alert), in kept members and skipped ones alike.
    @Test func aLoneHalfOfASurrogatePairReadsAsTheReplacementCharacter() throws {
        #expect(try parse(#""[\ud83d...]""#) == .string("[\u{FFFD}...]"))
        #expect(try parse(#""\udc00""#) == .string("\u{FFFD}"))
        #expect(try parse(#""\ud83d\u0041""#) == .string("\u{FFFD}A"), "the escape after it is read as itself")
        #expect(try parse(#""\ud83d\ud83d\udd34""#) == .string("\u{FFFD}🔴"))
        let skipped = try JSONParser.parse(Array(#"{"dropped": "\ud83d", "kept": 1}"#.utf8), keeping: ["kept"])
        #expect(skipped["kept"]?.intValue == 1)
    }

    @Test(arguments: [
        "", " ", "{", "}", "[1,]", "{\"a\":1,}", "{\"a\"1}", "{a:1}", "01", "-", "1.", ".5", "1e", "+1", "tru",
        "nul", "\"abc", "\"\\x\"", "\"\\u12\"", "\"a\u{1}b\"", "[1 2]", "{} {}",
        "NaN", "Infinity", "'a'", "[", "\"\\ud83d\\u12\""
    ])
    func rejectsInvalidDocuments(text: String) {
        #expect(throws: JSONParser.SyntaxError.self) { _ = try parse(text) }
        // A member the caller does not keep is skipped without being built, and must be refused all the same.
        let dropped = Array(#"{"kept": 1, "dropped": \#(text)}"#.utf8)
        #expect(throws: JSONParser.SyntaxError.self) { _ = try JSONParser.parse(dropped, keeping: ["kept"]) }
        let droppedInArray = Array(#"{"dropped": [0, \#(text)], "kept": 1}"#.utf8)
        #expect(throws: JSONParser.SyntaxError.self) { _ = try JSONParser.parse(droppedInArray, keeping: ["kept"]) }
    }

    @Test func keepsOnlyTheNamedMembersAtEveryDepth() throws {
        let text = #"{"a": [1, {"k": "x"}, -0.5e-3, "\u00e9"], "k": {"a": {"k": null}, "k": [true, false]}, "b": "\"k\""}"#
        #expect(try JSONParser.parse(Array(text.utf8), keeping: ["k"]) == .object([("k", .object([("k", .array([.bool(true), .bool(false)]))]))]))
        // A key is compared as text: an escaped spelling of a kept key is kept, one of the same length is not.
        let escaped = #"{"\u006b": 1, "kk": 2, "j": 3}"#
        #expect(try JSONParser.parse(Array(escaped.utf8), keeping: ["k", "jj"]) == .object([("k", .number("1"))]))
        // An empty name can be kept too (its filter bit has no first byte to go by).
        #expect(try JSONParser.parse(Array(#"{"": [], "a": 1}"#.utf8), keeping: ["", "b"]) == .object([("", .array([]))]))
    }

    @Test func refusesNestingDeeperThanTheLimitInADroppedMember() throws {
        let nested = String(repeating: "[", count: JSONParser.maximumDepth) + String(repeating: "]", count: JSONParser.maximumDepth)
        #expect(throws: JSONParser.SyntaxError.self) { _ = try JSONParser.parse(Array(#"{"dropped": \#(nested)}"#.utf8), keeping: ["kept"]) }
        let shallower = String(repeating: "[", count: JSONParser.maximumDepth - 1) + String(repeating: "]", count: JSONParser.maximumDepth - 1)
        #expect(try JSONParser.parse(Array(#"{"dropped": \#(shallower)}"#.utf8), keeping: ["kept"]) == .object([]))
    }

    @Test func rejectsInvalidUTF8InStrings() {
        #expect(throws: JSONParser.SyntaxError.self) { _ = try JSONParser.parse([0x22, 0xc3, 0x28, 0x22]) }
        #expect(throws: JSONParser.SyntaxError.self) { _ = try JSONParser.parse([0x22, 0xed, 0xa0, 0x80, 0x22]) }
    }

    @Test func refusesNestingDeeperThanTheLimit() throws {
        let ok = String(repeating: "[", count: JSONParser.maximumDepth) + String(repeating: "]", count: JSONParser.maximumDepth)
        _ = try parse(ok)
        let deep = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        #expect(throws: JSONParser.SyntaxError.self) { _ = try parse(deep) }
    }

    @Test func agreesWithFoundationOnTheFixtures() throws {
        let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fixtures/webhooks")
        for name in try FileManager.default.contentsOfDirectory(atPath: fixtures.path) where name.hasSuffix(".json") {
            let data = try Data(contentsOf: fixtures.appendingPathComponent(name))
            let ours = try JSONParser.parse(Array(data))
            let theirs = try JSONSerialization.jsonObject(with: data, options: [.fragmentsAllowed])
            #expect(Self.same(ours, theirs), "\(name)")
        }
    }

    static func same(_ ours: JSONValue, _ theirs: Any) -> Bool {
        switch ours {
        case .object(let members):
            guard let dictionary = theirs as? [String: Any], dictionary.count == Set(members.map(\.key)).count else { return false }
            return members.allSatisfy { member in dictionary[member.key].map { same(ours[member.key]!, $0) } ?? false }
        case .array(let elements):
            guard let array = theirs as? [Any], array.count == elements.count else { return false }
            return zip(elements, array).allSatisfy { same($0, $1) }
        case .string(let text): return theirs as? String == text
        case .number(let text): return (theirs as? NSNumber)?.doubleValue == Double(text)
        case .bool(let value): return (theirs as? NSNumber)?.boolValue == value
        case .null: return theirs is NSNull
        }
    }
}
