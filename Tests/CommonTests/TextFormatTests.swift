import Common
import Foundation
import Synchronization
import Testing

@Suite struct TextFormatTests {
    @Test func rfc3339IsUTCToTheSecond() {
        #expect(RFC3339.string(epochMillis: 0) == "1970-01-01T00:00:00Z")
        #expect(RFC3339.string(epochMillis: 1_789_905_600_999) == "2026-09-20T12:00:00Z")
        #expect(RFC3339.string(epochMillis: 951_782_400_000) == "2000-02-29T00:00:00Z")
        #expect(RFC3339.clockString(epochMillis: 1_789_905_780_000) == "12:03")
        #expect(RFC3339.parse("2026-09-20T12:00:00Z") == 1_789_905_600_000)
    }

    @Test func jsonQuotingEscapesControlCharactersQuotesAndKeepsEmoji() {
        #expect(JSONText.quoted("a\"b\\c\nd\u{1}🔴") == "\"a\\\"b\\\\c\\nd\\u0001🔴\"")
    }

    /// The byte writer the APNs payload uses must escape exactly as `quoted` does.
    @Test(arguments: ["", "plain", "a\"b\\c\nd\r\t\u{1}\u{1f}\u{7f}", "é🔴 ünïcode", String(repeating: "\u{0}x", count: 3)])
    func quotingIntoBytesMatchesQuoting(_ text: String) {
        var bytes: [UInt8] = []
        JSONText.appendQuoted(text, to: &bytes)
        #expect(String(decoding: bytes, as: UTF8.self) == JSONText.quoted(text))
    }

    /// The APNs payload writes its badge with this: the same digits as `String(number)`.
    @Test(arguments: [0, 7, 10, 99, 100, 12_345, -1, -10, -907, Int.max, Int.min])
    func decimalDigitsAreStringsDigits(_ number: Int) {
        var bytes: [UInt8] = [UInt8(ascii: "x")]
        JSONText.appendDecimal(number, to: &bytes)
        #expect(String(decoding: bytes, as: UTF8.self) == "x" + String(number))
    }

    /// Blocks of text between escapes are copied whole: what lies before, between and after each escape survives.
    @Test func escapingKeepsTheTextAroundEachEscape() {
        var bytes: [UInt8] = []
        JSONText.appendEscaped("\"start, mid\\dle\nand end\"", to: &bytes)
        #expect(String(decoding: bytes, as: UTF8.self) == #"\"start, mid\\dle\nand end\""#)
    }

    @Test func ipNetworksMatchByPrefix() throws {
        let net = try #require(IPNetwork("10.1.0.0/16"))
        #expect(net.contains(try #require(IPAddress("10.1.200.3"))))
        #expect(!net.contains(try #require(IPAddress("10.2.0.1"))))
        #expect(!net.contains(try #require(IPAddress("::1"))))
        let v6 = try #require(IPNetwork("fd00::/8"))
        #expect(v6.contains(try #require(IPAddress("fd12::1"))))
        // An IPv4-mapped IPv6 peer is the IPv4 client.
        #expect(IPAddress("::ffff:127.0.0.1") == IPAddress.loopbackV4)
        #expect(IPNetwork("1.2.3.4")?.prefixLength == 32)
        #expect(IPNetwork("1.2.3.4/40") == nil)
    }

    @Test func listenAddressesTakeIPv4AndBracketedIPv6() {
        #expect(ListenAddress("127.0.0.1:9464") == ListenAddress(host: "127.0.0.1", port: 9464))
        #expect(ListenAddress("[::1]:9464") == ListenAddress(host: "::1", port: 9464))
        #expect(ListenAddress("localhost:9464") == nil)
        #expect(ListenAddress("127.0.0.1") == nil)
    }

    @Test func apnsEndpointsParse() {
        #expect(APNsEndpoint("https://api.push.apple.com") == APNsEndpoint(host: "api.push.apple.com", port: 443))
        #expect(APNsEndpoint("https://127.0.0.1:8443")?.port == 8443)
        #expect(APNsEndpoint("https://[::1]:8443")?.host == "::1")
        #expect(APNsEndpoint("http://127.0.0.1") == nil)
        #expect(APNsEndpoint("https://host/path") == nil)
    }

    @Test func loggerWritesTextAndJSONLinesAndFiltersByLevel() throws {
        let lines = Mutex<[String]>([])
        let sink = LogSink(format: .json) { line in lines.withLock { $0.append(line) } }
        var logger = Logger(label: "test", level: .info, sink: sink)
        logger.metadata["conn.id"] = "7"
        logger.debug("hidden")
        logger.warning("job dead-lettered", ["apns.reason": "BadDeviceToken", "note": "quote\" and\nnewline"])
        let json = lines.withLock { $0 }
        #expect(json.count == 1)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(json[0].utf8)) as? [String: String])
        #expect(object["level"] == "warning" && object["logger"] == "test" && object["msg"] == "job dead-lettered")
        #expect(object["apns.reason"] == "BadDeviceToken" && object["conn.id"] == "7")
        #expect(object["note"] == "quote\" and\nnewline")

        let textLines = Mutex<[String]>([])
        let text = Logger(label: "ingest", level: .debug, sink: LogSink(format: .text) { line in textLines.withLock { $0.append(line) } })
        text.info("request", ["http.status": "202", "route": "/wh/:id"])
        let line = try #require(textLines.withLock { $0.first })
        #expect(line.hasSuffix("info    ingest: request http.status=202 route=/wh/:id"))
    }

    @Test func redactedTokensKeepOnlyAPrefix() {
        let token = String(repeating: "ab", count: 32)
        #expect(Redact.token(token) == "abababab…(64)")
    }
}
