import Common
import Testing

@testable import Ingest

/// SPEC §4 "No single point of trouble": a body from anyone who can reach `/wh/` is read in time linear in its size,
/// however it is shaped (issue 36). Held by counting the bytes the parsers visit (`WebhookParser.parse(_:steps:)`:
/// the form reader, the query string, strict and tolerant JSON), never by a clock: a reader that looks back or
/// starts over per field costs 16 times as much for 4 times the bytes, a linear one about 4 times.
@Suite struct ParserWorkTests {
    /// A request of about `size` bytes, of one shape, built to make one parser work hardest per byte.
    struct Shape: CustomTestStringConvertible, Sendable {
        let name: String
        let type: String
        let make: @Sendable (Int) -> String
        var method = "POST"
        var testDescription: String { name }

        func request(_ size: Int) -> HTTPRequest {
            let text = make(size)
            if method == "GET" { return HTTPRequest(method: "GET", path: "/wh/x", rawQuery: text) }
            let body = Array(text.utf8)
            // libmicrohttpd hands a multipart body's parts over as fields; the fuzz target sends it the same way.
            let fields = type.hasPrefix("multipart/") ? [(name: "data", value: body)] : []
            return HTTPRequest(method: "POST", path: "/wh/x", headers: ["content-type": type], body: body, formFields: fields)
        }
    }

    static func repeated(_ head: String, _ unit: String, _ tail: String, size: Int) -> String {
        head + String(repeating: unit, count: max(1, (size - head.utf8.count - tail.utf8.count) / unit.utf8.count)) + tail
    }

    /// Ordinary words, as a long ping or keyword message has them.
    static func words(_ size: Int) -> String { repeated("", "PING 10.0.0.7 failed, 100% packet loss ", "", size: size) }

    /// An ordinary alert of the same kind and size: the yardstick for the shaped ones.
    static func plain(like shape: Shape, size: Int) -> HTTPRequest {
        let plain =
            switch (shape.method, shape.type) {
            case ("GET", _):
                Shape(name: "", type: "", make: { "msg=" + repeated("", "PING+10.0.0.7+failed%2C+100%25+loss+", "", size: $0) }, method: "GET")
            case (_, "application/json"): Shape(name: "", type: shape.type) { "{\"title\":\"NAS\",\"body\":\"" + words($0 - 26) + "\"}" }
            case (_, let type) where type.hasPrefix("multipart/"):
                Shape(name: "", type: shape.type) { "{\"title\":\"NAS\",\"body\":\"" + words($0 - 26) + "\"}" }
            default: Shape(name: "", type: shape.type) { "title=NAS&body=" + words($0 - 15) }
            }
        return plain.request(size)
    }

    static func searchThatNeverEnds(_ size: Int) -> String { repeated("{\"a\":\"", "x\",\"b\":\"y\"}", "z", size: size) }

    static let shapes: [Shape] = [
        // Issue 36's body: the old form reader walked back to the last whitespace at every `&x=`.
        Shape(name: "form: many empty fields", type: "text/plain") { repeated("msg=a", "&x=", " ", size: $0) },
        // The same walk with fields wide enough to stay under the field cap at 64 KiB (910 fields).
        Shape(name: "form: wide fields", type: "text/plain") { repeated("msg=a", "&x=" + String(repeating: "a", count: 69), " ", size: $0) },
        // `&x=` in a word holding `?`, unescaped: each is looked at and none starts a field.
        Shape(name: "form: a URL's query of many parameters", type: "text/plain") {
            repeated("title=T&body=https://x/?", "a&x=", " ", size: $0)
        },
        // Every quote can end the string and the rest never parses: the search spends its budget, in both passes.
        Shape(name: "tolerant JSON: a search that never ends", type: "text/plain") { searchThatNeverEnds($0) },
        // A whole document at every quote: the search keeps finding readings.
        Shape(name: "tolerant JSON: a reading at every quote", type: "text/plain") {
            repeated("{\"title\":\"t\",\"body\":\"\n", "a\",\"title\":\"b", "\"}", size: $0)
        },
        // A quote, a comma and a long would-be key to look ahead over, at every quote.
        Shape(name: "tolerant JSON: long look-ahead", type: "text/plain") {
            repeated("{\"body\":\"\n", "x\", \"" + String(repeating: "k", count: 40), "\"}", size: $0)
        },
        // Whitespace after every quote, looked over to see what follows it.
        Shape(name: "tolerant JSON: whitespace after quotes", type: "text/plain") {
            repeated("{\"body\":\"\n", "\"" + String(repeating: " ", count: 30) + "x", "\"}", size: $0)
        },
        // A JSON string holding the search (axios' double encoding): strict JSON, then custom text on what it held.
        Shape(name: "JSON string holding a search", type: "application/json") {
            "\"" + repeated("{\\\"a\\\":\\\"", "x\\\",\\\"b\\\":\\\"y\\\"}", "z", size: $0 - 2) + "\""
        },
        // A tolerant top-level string holding the search: custom text read twice, as deep as it goes.
        Shape(name: "custom text: a string holding a search", type: "text/plain") {
            "\"\n" + repeated("{\\\"a\\\":\\\"", "x\\\",\\\"b\\\":\\\"y\\\"}", "z", size: $0 - 3) + "\""
        },
        Shape(name: "form: data holding a search", type: "application/x-www-form-urlencoded") { "data=" + searchThatNeverEnds($0 - 5) },
        Shape(name: "multipart: data holding a search", type: "multipart/form-data; boundary=x") { searchThatNeverEnds($0) },
        // Strict JSON at its slowest per byte: every member's key holds escapes, so it is decoded to be compared.
        Shape(name: "JSON: escaped keys", type: "application/json") { repeated("{\"msg\":\"m\"", ",\"\\u006b\\u0065y\":1", "}", size: $0) },
        // GET: many parameters, and a heartbeat whose JSON holds escaped keys.
        Shape(name: "query: many parameters", type: "", make: { repeated("msg=a", "&x=", "", size: $0) }, method: "GET"),
        Shape(
            name: "query: escaped JSON", type: "", make: { repeated("monitor=%7B%22id%22:1", ",%22%5Cu0069d%22:1", "%7D", size: $0) }, method: "GET")
    ]

    func work(_ request: HTTPRequest) -> Int {
        var steps = 0
        _ = WebhookParser.parse(request, steps: &steps)
        return steps
    }

    /// Four times the bytes cost at most five times the work (a quadratic reader: sixteen).
    @Test(arguments: shapes) func aShapedBodyCostsInProportionToItsSize(shape: Shape) {
        let small = work(shape.request(16 << 10))
        let large = work(shape.request(64 << 10))
        #expect(small > 0 && large <= 5 * small, "16 KiB: \(small) steps, 64 KiB: \(large)")
    }

    /// The largest body the relay reads, shaped, costs at most ten plain ones of its size and kind.
    @Test(arguments: shapes) func aShapedBodyCostsAtMostTenPlainOnes(shape: Shape) {
        let shaped = work(shape.request(64 << 10))
        let plain = work(Self.plain(like: shape, size: 64 << 10))
        #expect(plain > 0 && shaped <= 10 * plain, "shaped: \(shaped) steps, plain: \(plain)")
    }

    /// The shapes are what their names say: each reaches the parser it was built for (a shape that fell through to
    /// a cheaper path would pass the two tests above for the wrong reason).
    @Test func theShapesReachTheirParsers() throws {
        let shapes = Dictionary(uniqueKeysWithValues: Self.shapes.map { ($0.name, $0) })
        func event(_ name: String) throws -> AlertEvent { try WebhookParser.parse(shapes[name]!.request(64 << 10)).get() }
        // Under the field cap the wide form is a form; past it the body is text.
        #expect(try event("form: wide fields") == .test("a"))
        #expect(try event("form: many empty fields").kind == .generic)
        #expect(try event("form: a URL's query of many parameters").title == "T")
        #expect(try event("tolerant JSON: a reading at every quote") == AlertEvent(kind: .generic, title: "b", message: "\na"))
        #expect(try event("JSON: escaped keys") == .test("m"))
        #expect(try event("query: many parameters") == .test("a"))
        // The never-ending search finds nothing: the body is text, whichever way it came.
        for name in ["tolerant JSON: a search that never ends", "form: data holding a search", "multipart: data holding a search"] {
            #expect(try event(name).message.hasPrefix("{\"a\":\"x\""), "\(name)")
        }
    }
}
