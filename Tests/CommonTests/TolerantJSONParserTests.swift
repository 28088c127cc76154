import Common
import Testing

/// The tolerant path of SPEC §2.2: JSON as an unescaping template writes it, and nothing looser.
@Suite struct TolerantJSONParserTests {
    func parse(_ text: String) -> JSONValue? { TolerantJSONParser.parse(Array(text.utf8)) }

    @Test func rawControlCharactersInsideStringsAreTakenLiterally() {
        let ping = "PING 10.20.0.7 (10.20.0.7) 56(84) bytes of data.\n\n--- 10.20.0.7 ping statistics ---\r\n\t100% packet loss\n\n"
        #expect(parse("{\"title\":\"NAS\",\"body\":\"\(ping)\"}") == .object([("title", .string("NAS")), ("body", .string(ping))]))
    }

    @Test func aQuoteThatCannotEndTheStringIsText() {
        let keyword = "200 - OK, but keyword is not in [<html lang=\"en\"><title>\"Main\", shop</title>...]"
        #expect(parse("{\"title\":\"Shop \"Main\"\",\"body\":\"\(keyword)\"}")?["title"]?.stringValue == "Shop \"Main\"")
        #expect(parse("{\"title\":\"Shop \"Main\"\",\"body\":\"\(keyword)\"}")?["body"]?.stringValue == keyword)
        // `", ` followed by text rather than the next key is inside the string.
        #expect(parse("{\"body\":\"he said \"hi\", then left\"}")?["body"]?.stringValue == "he said \"hi\", then left")
        #expect(parse("{\"body\":\"x\", \"y\"}")?["body"]?.stringValue == "x\", \"y", "\"y\" is no key: no ':' follows")
        #expect(parse("[\"a\"b\", \"c\"]") == .array([.string("a\"b"), .string("c")]))
        #expect(parse("\"top \"level\" text\"") == .string("top \"level\" text"))
    }

    /// The first quote that may end a string is not always the one that ends it: when the rest does not parse after
    /// it, the next one is tried.
    @Test func aQuoteThatEndsTooEarlyForTheRestToParseIsText() {
        let message = #"keyword is not in [{"status":"error"}]"#
        #expect(parse("{\"title\":\"API\",\"body\":\"\(message)\"}") == .object([("title", .string("API")), ("body", .string(message))]))
        #expect(parse(#"["a"]", "b"]"#) == .array([.string(#"a"]"#), .string("b")]))
    }

    /// A body built to make the search branch costs a bounded number of parses: the answer comes, whatever it is.
    @Test func theSearchIsBounded() {
        let branching = "{\"a\":\"" + String(repeating: #"x","b":"y"}"#, count: 2_000) + "z"
        #expect(parse(branching) == nil)
    }

    @Test func backslashesThatEscapeNothingAreText() {
        #expect(
            parse("{\"body\":\"C:\\shop\\status \\x \\u12 \\ud83d alone\"}")?["body"]?.stringValue
                == "C:\\shop\\status \\x \\u12 \\ud83d alone")
        #expect(parse("{\"body\":\"tab\\there \\\"q\\\" \\ud83d\\udd34\"}")?["body"]?.stringValue == "tab\there \"q\" 🔴")
    }

    @Test func aMessageEndingInABackslashBeforeTheTemplatesQuote() {
        #expect(
            parse("{\"title\":\"Backup\",\"body\":\"missing: D:\\\"}")
                == .object([("title", .string("Backup")), ("body", .string("missing: D:\\"))]))
        // Where the document parses with `\"` as an escaped quote, that reading wins.
        #expect(parse("{\"body\":\"say \\\"hi\\\"\n\"}")?["body"]?.stringValue == "say \"hi\"\n")
    }

    @Test func fourByteEmojiAndNestedValuesSurvive() {
        let value = parse("{\"heartbeat\":{\"status\":0,\"msg\":\"🔴🐘 down\n\"},\"monitor\":{\"id\":3,\"name\":\"DB 🧯\"},\"tags\":[1,true,null]}")
        #expect(value?["heartbeat"]?["msg"]?.stringValue == "🔴🐘 down\n")
        #expect(value?["monitor"]?["id"]?.intValue == 3 && value?["monitor"]?["name"]?.stringValue == "DB 🧯")
        #expect(value?["tags"] == .array([.number("1"), .bool(true), .null]))
    }

    @Test func validJSONReadsAsTheStrictParserReadsIt() throws {
        let text = #"{"a":[1,-2.5e3,true,false,null],"b":{"c":"d\n\"e\"\\"},"f":"é🔴"}"#
        #expect(parse(text) == (try JSONParser.parse(Array(text.utf8))))
    }

    /// Ambiguity is not guessed at: the caller falls back to the text itself.
    @Test(arguments: [
        "", "{", "{\"title\": nope}", "{\"a\":\"b\" \"c\":1}", "{\"a\":\"unterminated}", "[1,]", "{} {}",
        "{\"a\":01}", "plain text"
    ])
    func whatIsNotJSONEvenTolerantlyIsNil(text: String) {
        #expect(parse(text) == nil)
    }

    @Test func strictnessThatProtectsIsKept() {
        #expect(TolerantJSONParser.parse([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xff, 0x22, 0x7d]) == nil, "invalid UTF-8")
        let ok = String(repeating: "[", count: JSONParser.maximumDepth) + String(repeating: "]", count: JSONParser.maximumDepth)
        #expect(parse(ok) != nil)
        let deep = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        #expect(parse(deep) == nil, "nesting beyond the limit is refused, not a stack overflow")
    }
}
