import Common
import Foundation
import Ingest
import Testing

/// Every body mode Uptime Kuma has, parsed into the event and then the push the phone shows.
@Suite struct WebhookParserTests {
    let builder = PushBuilder(lateNotice: .seconds(120))

    func json(_ bytes: [UInt8], type: String = "application/json") -> HTTPRequest {
        HTTPRequest(method: "POST", path: "/wh/x", headers: ["content-type": type], body: bytes)
    }

    func push(_ request: HTTPRequest, timeSensitive: Bool = false) throws -> PushMessage {
        let event = try WebhookParser.parse(request).get()
        return builder.notification(for: event, timeSensitiveDown: timeSensitive, acceptedAt: 0, now: 0)
    }

    @Test func example_A_123_httpDown() throws {
        let n = try push(json(Fixtures.bytes("a-1.23-http-down.json")), timeSensitive: true)
        #expect(
            n
                == PushMessage(
                    title: "Shop API is down", body: "Request failed with status code 503",
                    interruptionLevel: .timeSensitive, threadID: "monitor-12"))
    }

    @Test func example_B_25_httpDownInGroup() throws {
        let n = try push(json(Fixtures.bytes("b-2.5-http-down-in-group.json")), timeSensitive: false)
        #expect(
            n
                == PushMessage(
                    title: "Shop API is down", body: "Request failed with status code 502",
                    interruptionLevel: .active, threadID: "monitor-12"))
    }

    @Test func example_C_pushMonitorUpIsNeverTimeSensitive() throws {
        let n = try push(json(Fixtures.bytes("c-2.5-push-up.json")), timeSensitive: true)
        #expect(n == PushMessage(title: "Nightly backup is up", body: "OK", interruptionLevel: .active, threadID: "monitor-21"))
    }

    /// A heartbeat without a status (a hand-written template) says nothing about up or down: "changed state", never
    /// a DOWN alert (a missing status used to read as 0, down, and raised the badge).
    @Test func aHeartbeatWithoutAStatusIsAChangeOfStateNotADown() throws {
        let request = json(Array(#"{"heartbeat":{"msg":"deploy finished"},"monitor":{"id":4,"name":"Shop"},"msg":"x"}"#.utf8))
        let event = try WebhookParser.parse(request).get()
        #expect(event.kind == .monitor && event.status == nil)
        #expect(try push(request, timeSensitive: true).title == "Shop changed state")
    }

    @Test func example_D_testButton() throws {
        let event = try WebhookParser.parse(json(Fixtures.bytes("d-test-button.json"))).get()
        #expect(event == .test("My Webhook Alert (1) Testing"))
        #expect(event.waitsForDelivery)
        let n = builder.notification(for: event, timeSensitiveDown: true, acceptedAt: 0, now: 0)
        #expect(n == PushMessage(title: "KumaPush", body: "My Webhook Alert (1) Testing"))
    }

    @Test func example_E_certificateExpiryIsATestShapedPush() throws {
        let n = try push(json(Fixtures.bytes("e-certificate-expiry.json")))
        #expect(n.title == "KumaPush")
        #expect(n.body == "[Shop API][https://shop.example.com/health] server certificate shop.example.com will expire in 13 days")
    }

    @Test func example_F_resendReminderSaysStillDown() throws {
        let n = try push(json(Fixtures.bytes("f-1.23-ping-down-reminder.json")), timeSensitive: true)
        #expect(n.title == "NAS ping is still down")
        #expect(n.body.hasPrefix("PING 10.20.0.7 (10.20.0.7) 56(84) bytes of data.\n\n--- 10.20.0.7 ping statistics ---"))
        #expect(n.interruptionLevel == .timeSensitive && n.threadID == "monitor-15")
    }

    @Test func multiLineMessageWithQuotesBackslashesAnd4ByteEmoji() throws {
        let n = try push(json(Fixtures.bytes("g-multiline-emoji-ping-down.json")))
        #expect(n.title == "DB 🐘 \"primary\" is down")
        #expect(n.body == "PING db.internal \"primary\" 🔴🧯\nC:\\path\\x\n\n--- 100% packet loss ---\n")
        let payload = try #require(try JSONSerialization.jsonObject(with: Data(APNsPayload.encode(n))) as? [String: Any])
        let alert = try #require((payload["aps"] as? [String: Any])?["alert"] as? [String: String])
        #expect(alert["body"] == n.body && alert["title"] == n.title)
    }

    @Test func customBodyRawJSONUnderURLEncoded() throws {
        let n = try push(json(Fixtures.bytes("a-1.23-http-down.json"), type: "application/x-www-form-urlencoded"))
        #expect(n.title == "Shop API is down")
    }

    @Test func bracketNotationFormFromAContentTypeOverride() throws {
        // json mode with an Additional Header `Content-Type: application/x-www-form-urlencoded`: axios form-encodes
        // the object in bracket notation (captured from the real client).
        let captured = CapturedRequest("real-json-urlencoded-header-http-down.http")
        #expect(String(decoding: captured.body, as: UTF8.self).hasPrefix("heartbeat%5BmonitorID%5D=12&"))
        #expect(
            try push(captured.parserRequest)
                == PushMessage(title: "Shop API is down", body: "Request failed with status code 503", threadID: "monitor-12"))
    }

    /// In a form every value is text: a monitor named `2024` or a message `503` must stay text (they were read as
    /// numbers and refused as "monitor.name is not a string").
    @Test func bracketNotationTextThatLooksLikeANumberStaysText() throws {
        let body = "heartbeat%5Bstatus%5D=0&heartbeat%5Bmsg%5D=503&monitor%5Bid%5D=7&monitor%5Bname%5D=2024&msg=x"
        #expect(
            try push(json(Array(body.utf8), type: "application/x-www-form-urlencoded"))
                == PushMessage(title: "2024 is down", body: "503", threadID: "monitor-7"))
    }

    @Test func genericTitleAndBody() throws {
        #expect(try push(json(Fixtures.bytes("i-generic.json"))) == PushMessage(title: "Backup finished", body: "nightly: 42 GB in 3m 🙂"))
        #expect(try push(json(Array("{\"body\":\"only body\"}".utf8))) == PushMessage(title: "KumaPush", body: "only body"))
    }

    @Test func pendingMaintenanceAndEmptyTestMessage() throws {
        let pending = try push(
            json(Array("{\"heartbeat\":{\"status\":2,\"msg\":\"retrying\"},\"monitor\":{\"id\":1,\"name\":\"A\"}}".utf8)), timeSensitive: true)
        #expect(pending.title == "A is pending" && pending.interruptionLevel == .active)
        let maintenance = try push(json(Array("{\"heartbeat\":{\"status\":3},\"monitor\":{\"name\":\"A\"},\"msg\":\"\"}".utf8)))
        #expect(maintenance.title == "A is under maintenance" && maintenance.threadID == "monitor-A")
        #expect(try push(json(Array("{\"heartbeat\":null,\"monitor\":null,\"msg\":\"\"}".utf8))).body == "Test notification")
    }

    @Test(arguments: [
        "", "{", "{\"heartbeat\":", "[1,2]", "42", "null", "{}", "{\"other\":1}",
        "{\"heartbeat\":\"down\",\"monitor\":{}}", "{\"heartbeat\":{\"status\":\"0\"},\"monitor\":{\"name\":\"A\"}}",
        "{\"heartbeat\":{\"status\":0},\"monitor\":{\"name\":5}}", "{\"msg\":7}", "{\"title\":1}", "{\"title\":[\"x\"]}",
        "{\"heartbeat\":{\"status\":true},\"monitor\":{\"name\":\"A\"}}", "{\"heartbeat\":{\"status\":0.5},\"monitor\":{}}"
    ])
    func hostileJSONIsAnInvalidBody(text: String) {
        guard case .failure(.invalidBody(let reason)) = WebhookParser.parse(json(Array(text.utf8))) else {
            Issue.record("\(text) was accepted")
            return
        }
        #expect(!reason.isEmpty)
    }

    @Test func invalidUTF8IsAnInvalidBody() {
        #expect(
            WebhookParser.parse(json([0x7b, 0x22, 0x6d, 0x73, 0x67, 0x22, 0x3a, 0x22, 0xff, 0xfe, 0x22, 0x7d]))
                == .failure(.invalidBody("invalid JSON at byte 11: invalid UTF-8 in string")))
        let query = HTTPRequest(method: "GET", path: "/wh/x", rawQuery: "msg=%FF%FE")
        #expect(WebhookParser.parse(query) == .failure(.invalidBody("the query string has an invalid %-escape or is not UTF-8")))
        #expect(
            WebhookParser.parse(HTTPRequest(method: "GET", path: "/wh/x", rawQuery: "msg=%Z1"))
                == .failure(.invalidBody("the query string has an invalid %-escape or is not UTF-8")))
    }

    @Test func otherContentTypesAreUnsupported() {
        for type in ["application/xml", "image/png"] {
            #expect(WebhookParser.parse(json(Array("{}".utf8), type: type)) == .failure(.unsupportedMediaType))
        }
        let none = HTTPRequest(method: "POST", path: "/wh/x", body: Array("{}".utf8))
        #expect(WebhookParser.parse(none) == .failure(.unsupportedMediaType))
        #expect(WebhookParser.parse(HTTPRequest(method: "GET", path: "/wh/x")) == .failure(.invalidBody("no title, body or msg field")))
    }
}

@Suite struct PushMessageTests {
    @Test func payloadIsTheAPNsShape() throws {
        let n = PushMessage(title: "DB is down", body: "timeout", interruptionLevel: .timeSensitive, threadID: "monitor-1")
        #expect(
            String(decoding: APNsPayload.encode(n), as: UTF8.self)
                == "{\"aps\":{\"alert\":{\"title\":\"DB is down\",\"body\":\"timeout\"},\"sound\":\"default\",\"interruption-level\":\"time-sensitive\",\"thread-id\":\"monitor-1\"}}"
        )
    }

    @Test func longBodiesAreCutAtACharacterBoundaryToFit4096Bytes() throws {
        let body = String(repeating: "🔴 line \"quoted\"\n", count: 400)
        let n = PushMessage(title: "T", body: body)
        let bytes = APNsPayload.encode(n)
        #expect(bytes.count <= 4096 && bytes.count > 4000)
        let alert = try #require(
            ((try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any])?["aps"] as? [String: Any])?["alert"] as? [String: String])
        let cut = try #require(alert["body"])
        #expect(cut.hasSuffix("…"))
        #expect(body.hasPrefix(String(cut.dropLast())))
        #expect(alert["title"] == "T")
    }

    @Test func aHugeTitleIsCutAfterTheBody() throws {
        let n = PushMessage(title: String(repeating: "é", count: 5000), body: "body")
        let bytes = APNsPayload.encode(n)
        #expect(bytes.count <= 4096)
        let alert = try #require(
            ((try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any])?["aps"] as? [String: Any])?["alert"] as? [String: String])
        #expect(alert["body"] == "")
        #expect(alert["title"]?.hasSuffix("é…") == true)
    }

    @Test func aLatePushSaysWhenTheEventHappenedAndKeepsThatWhenCut() throws {
        let builder = PushBuilder(lateNotice: .seconds(120))
        let event = AlertEvent(kind: .monitor, status: .down, monitorID: 1, monitorName: "DB", message: String(repeating: "x", count: 5000))
        let accepted: Int64 = 1_789_905_780_000  // 12:03 UTC
        let onTime = builder.notification(for: event, timeSensitiveDown: false, acceptedAt: accepted, now: accepted + 120_000)
        #expect(onTime.bodySuffix == "")
        let late = builder.notification(for: event, timeSensitiveDown: false, acceptedAt: accepted, now: accepted + 120_001)
        #expect(late.fullBody.hasSuffix(" · delayed, event at 12:03 UTC"))
        let text = String(decoding: APNsPayload.encode(late), as: UTF8.self)
        #expect(text.contains("… · delayed, event at 12:03 UTC\""), "the body is cut, the notice kept whole")
        #expect(APNsPayload.encode(late).count <= 4096)
    }

    @Test func monitorsWithoutNamesStillReadWell() {
        let builder = PushBuilder(lateNotice: .seconds(120))
        let withID = builder.notification(
            for: AlertEvent(kind: .monitor, status: .up, monitorID: 9, message: ""), timeSensitiveDown: false, acceptedAt: 0, now: 0)
        #expect(withID.title == "Monitor 9 is up")
        let bare = builder.notification(for: AlertEvent(kind: .monitor, status: nil, message: ""), timeSensitiveDown: false, acceptedAt: 0, now: 0)
        #expect(bare.title == "A monitor changed state" && bare.threadID == nil)
    }

    @Test func eventsSurviveTheJobPayloadRoundTrip() throws {
        let events = [
            AlertEvent(kind: .monitor, status: .down, important: false, monitorID: 4, monitorName: "🐘 \"x\"", message: "a\nb\\"),
            AlertEvent(kind: .monitor, status: nil, message: ""), .test("Testing"),
            AlertEvent(kind: .generic, title: "T", message: "B")
        ]
        for event in events { #expect(AlertEvent(jobPayload: event.jobPayload) == event) }
        #expect(AlertEvent(jobPayload: Array("not json".utf8)) == nil)
        // The stored form, byte for byte: jobs queued by one version are delivered by the next.
        let stored = AlertEvent(kind: .monitor, status: .down, important: false, monitorID: 4, monitorName: "N", title: "", message: "m\"\u{1}")
        #expect(String(decoding: stored.jobPayload, as: UTF8.self) == #"{"k":"monitor","s":0,"i":false,"id":4,"n":"N","m":"m\"\u0001"}"#)
    }
}
