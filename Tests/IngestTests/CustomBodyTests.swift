import Common
import Foundation
import Ingest
import Testing

/// SPEC §2.2 "Custom bodies as users really write them": every body Uptime Kuma's real client sends (captured in
/// Tests/Fixtures/webhooks/real-*.http) becomes an event, and only a body with no usable text is refused.
@Suite struct CustomBodyTests {
    static let pingDown =
        "[NAS ping] [🔴 Down] PING 10.20.0.7 (10.20.0.7) 56(84) bytes of data.\n\n--- 10.20.0.7 ping statistics ---\n"
        + "1 packets transmitted, 0 received, 100% packet loss, time 0ms\n\n"
    static let keywordDown =
        "[Shop \"Main\" page] [🔴 Down] 200 - OK, but keyword is not in [<html lang=\"en\">\n<head>\n\t<title>Shop \"Main\" C:\\...]"

    func event(_ fixture: String) throws -> AlertEvent {
        try WebhookParser.parse(CapturedRequest(fixture).parserRequest).get()
    }

    func request(_ body: String, type: String) -> HTTPRequest {
        HTTPRequest(method: "POST", path: "/wh/x", headers: ["content-type": type], body: Array(body.utf8))
    }

    func parse(_ body: String, type: String) -> Result<AlertEvent, WebhookParser.Rejection> {
        WebhookParser.parse(request(body, type: type))
    }

    // MARK: - What Uptime Kuma's client really sends

    @Test func unescapedTemplateWithAMultiLinePingFailureUnderTheDefaultURLEncoded() throws {
        let captured = CapturedRequest("real-custom-ping-down.http")
        #expect(captured.headers["content-type"] == "application/x-www-form-urlencoded")
        #expect(throws: JSONParser.SyntaxError.self) { try JSONParser.parse(captured.body) }
        #expect(try event("real-custom-ping-down.http") == AlertEvent(kind: .generic, title: "NAS ping", message: Self.pingDown))
    }

    @Test func unescapedTemplateWithQuotesATabAndBackslashesFromAKeywordMiss() throws {
        #expect(
            try event("real-custom-keyword-down.http")
                == AlertEvent(kind: .generic, title: "Shop \"Main\" page", message: Self.keywordDown))
    }

    /// A keyword monitor on a JSON health endpoint quotes the page in its message, so the rendered template holds
    /// `"}]` and `","db":` inside the body. The short page was no JSON even tolerantly (the push showed the raw template
    /// under the title KumaPush); the long one read as a body cut at `"error` with made-up `db` and `cache` keys.
    @Test(arguments: [
        ("real-custom-keyword-json-short-down.http", #"{"status":"error"}"#),
        ("real-custom-keyword-json-long-down.http", #"{"status":"error","db":"down","cache":"ok","que..."#)
    ])
    func aKeywordMissQuotingJSONKeepsTheTemplatesTitleAndTheWholeMessage(fixture: String, page: String) throws {
        #expect(
            try event(fixture)
                == AlertEvent(kind: .generic, title: "Orders API", message: "[Orders API] [🔴 Down] 200 - OK, but keyword is not in [\(page)]"))
    }

    /// Templates with more members than a title and a body, rendered with a multi-line message: each member ends where
    /// it first can (a reading where a string swallows the next member is no more template-like).
    @Test func extraTemplateMembersStayMembers() throws {
        let ping = "PING 10.0.0.7\n--- 10.0.0.7 ping statistics ---\n100% packet loss"
        #expect(
            try parse("{\"title\":\"NAS\",\"body\":\"\(ping)\",\"url\":\"10.0.0.7\"}", type: "text/plain").get()
                == AlertEvent(kind: .generic, title: "NAS", message: ping))
        #expect(
            try parse("{\"title\":\"NAS\",\"status\":\"🔴 Down\",\"body\":\"[NAS] [🔴 Down] \(ping)\"}", type: "text/plain").get()
                == AlertEvent(kind: .generic, title: "NAS", message: "[NAS] [🔴 Down] \(ping)"))
    }

    /// A message quoting JSON with many members gives more readings than the search tries: the relay then reads as
    /// the first parse does (here: as text), and the message is never cut.
    @Test func aSearchCutShortKeepsTheWholeMessage() throws {
        let quoted = #"x [{"a":"1","b":"2","c":"3","d":"4","e":"5","f":"6","g":"7","h":"8"}]"#
        let event = try parse("{\"title\":\"T\",\"body\":\"\(quoted)\"}", type: "text/plain").get()
        #expect(event.message.contains(quoted), "\(event)")
    }

    @Test func templateJSONStringifiedByAxiosUnderAJSONContentTypeHeader_7211() throws {
        let captured = CapturedRequest("real-custom-json-header-ping-down.http")
        #expect(captured.headers["content-type"] == "application/json" && captured.body.first == UInt8(ascii: "\""))
        #expect(try event("real-custom-json-header-ping-down.http") == AlertEvent(kind: .generic, title: "NAS ping", message: Self.pingDown))
    }

    @Test func templateThatRendersValidJSONIsSentAsItIs() throws {
        #expect(
            try event("real-custom-json-header-http-down.http")
                == AlertEvent(kind: .generic, title: "Shop API", message: "[Shop API] [🔴 Down] Request failed with status code 503"))
    }

    @Test func plainTextTemplateIsTheBodyOfAKumaPush() throws {
        let event = try event("real-custom-text-ping-down.http")
        #expect(event == AlertEvent(kind: .generic, message: "🔴 Down NAS ping: " + Self.pingDown.trimmingCharacters(in: .newlines)))
        let push = PushBuilder(lateNotice: .seconds(120)).notification(for: event, timeSensitiveDown: false, acceptedAt: 0, now: 0)
        #expect(push.title == "KumaPush")
    }

    @Test func jsonModeAndGetModeFromTheRealClient() throws {
        let ping = try event("real-json-ping-down.http")
        #expect(
            ping
                == AlertEvent(
                    kind: .monitor, status: .down, monitorID: 15, monitorName: "NAS ping",
                    message: String(Self.pingDown.dropFirst("[NAS ping] [🔴 Down] ".count))))
        let get = CapturedRequest("real-get-http-up.http")
        #expect(get.target.utf8.count > 2500, "a real GET carries the whole monitor in its URL")
        #expect(
            try event("real-get-http-up.http")
                == AlertEvent(kind: .monitor, status: .up, monitorID: 33, monitorName: "Web 🐘🔴 \\ edge", message: "200 - OK"))
        #expect(try event("real-get-test-button.http") == .test("My Webhook Alert (1) Testing"))
    }

    // MARK: - The rules, one by one

    @Test func textPlainIsReadLikeACustomBody() throws {
        let body = "{\"title\":\"NAS\",\"body\":\"line one\nline two\"}"
        #expect(try parse(body, type: "text/plain; charset=utf-8").get() == AlertEvent(kind: .generic, title: "NAS", message: "line one\nline two"))
        #expect(try parse("  backup finished 🙂\n", type: "text/plain").get() == AlertEvent(kind: .generic, message: "backup finished 🙂"))
    }

    @Test func formFieldsAreUsedAsSuch() throws {
        // An unescaped `title={{name}}&body={{msg}}` template: raw spaces, newlines, a `%` that escapes nothing, an `&`.
        let template = "title=NAS ping&body=PING x\n1 transmitted, 100% packet loss & no reply"
        #expect(
            try parse(template, type: "application/x-www-form-urlencoded").get()
                == AlertEvent(kind: .generic, title: "NAS ping", message: "PING x\n1 transmitted, 100% packet loss & no reply"))
        let data = "data=" + (Fixtures.text("d-test-button.json").addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "")
        #expect(try parse(data, type: "application/x-www-form-urlencoded").get() == .test("My Webhook Alert (1) Testing"))
        #expect(try parse("msg=Backup+done", type: "text/plain").get() == .test("Backup done"))
        // In unescaped text only the names the relay reads start a field: a monitor URL's query stays in the message.
        let certificate =
            "title=Shop API&body=[Shop API][https://shop.example.com/health?key=abc&region=eu] certificate will expire in 13 days"
        #expect(
            try parse(certificate, type: "text/plain").get()
                == AlertEvent(
                    kind: .generic, title: "Shop API",
                    message: "[Shop API][https://shop.example.com/health?key=abc&region=eu] certificate will expire in 13 days"))
        // Other fields after the message are still fields.
        #expect(
            try parse("title=NAS&body=PING failed 100% packet loss&priority=high", type: "text/plain").get()
                == AlertEvent(kind: .generic, title: "NAS", message: "PING failed 100% packet loss"))
        // A form of names the relay does not read is text like any other.
        #expect(try parse("foo=bar", type: "application/x-www-form-urlencoded").get() == AlertEvent(kind: .generic, message: "foo=bar"))
    }

    /// A form holds at most 1,000 fields (Uptime Kuma's largest, a monitor in bracket notation, holds about 100): a
    /// text with more is custom text, so its push still goes out with the text as the body (issue 36).
    @Test func aFormOfMoreThanAThousandFieldsIsText() throws {
        let atTheCap = "msg=Backup+done" + String(repeating: "&x=1", count: 999)
        #expect(try parse(atTheCap, type: "application/x-www-form-urlencoded").get() == .test("Backup done"))
        let pastTheCap = atTheCap + "&x=1"
        #expect(try parse(pastTheCap, type: "application/x-www-form-urlencoded").get() == AlertEvent(kind: .generic, message: pastTheCap))
        // Unescaped, as issue 36's body was: the same.
        let unescaped = "msg=a" + String(repeating: "&x=", count: 21_800) + " "
        #expect(
            try parse(unescaped, type: "text/plain").get()
                == AlertEvent(kind: .generic, message: String(unescaped.dropLast().prefix(4096))))
    }

    @Test func jsonThatHoldsFormLikeTextIsStillJSON() throws {
        #expect(
            try parse("{\"title\":\"A\",\"body\":\"x=1&msg=2\"}", type: "application/x-www-form-urlencoded").get()
                == AlertEvent(kind: .generic, title: "A", message: "x=1&msg=2"))
    }

    @Test(arguments: [
        ("{\"subject\":\"S\",\"message\":\"M\"}", "S", "M"), ("{\"title\":\"T\",\"text\":\"X\"}", "T", "X"),
        ("{\"title\":\"T\",\"msg\":\"from msg\"}", "T", "from msg"), ("{\"text\":\"only text\"}", "", "only text"),
        ("{\"title\":\"only a title\"}", "only a title", ""), ("{\"title\":5,\"body\":\"B\"}", "", "B")
    ])
    func genericObjectsUseTheCommonTemplateNames(body: String, title: String, message: String) throws {
        #expect(try parse(body, type: "application/json").get() == AlertEvent(kind: .generic, title: title, message: message))
    }

    /// A `+` in raw text is a plus: only escaped text writes a space as `+`.
    @Test func aPlusInAnUnescapedTemplateStaysAPlus() throws {
        #expect(
            try parse("title=C++ worker&body=clock offset +3s over limit", type: "text/plain").get()
                == AlertEvent(kind: .generic, title: "C++ worker", message: "clock offset +3s over limit"))
        #expect(try parse("msg=Backup+done", type: "application/x-www-form-urlencoded").get() == .test("Backup done"))
    }

    /// A custom body with the Additional Header `Content-Type: application/json`: axios stringifies the form, and the
    /// JSON string is read as a text body is, so its title and body are used.
    @Test func aFormInAJSONStringIsUsedAsAForm() throws {
        #expect(
            try parse("\"title=DB&body=down\"", type: "application/json").get()
                == AlertEvent(kind: .generic, title: "DB", message: "down"))
    }

    @Test func aJSONStringThatHoldsNoJSONIsText() throws {
        #expect(
            try parse("\"Disk almost full\\non nas\"", type: "application/json").get()
                == AlertEvent(kind: .generic, message: "Disk almost full\non nas"))
    }

    @Test func textThatIsNotAnObjectBecomesTheBody() throws {
        for text in ["42", "null", "[1,2]", "{\"title\": nope}"] {
            #expect(try parse(text, type: "text/plain").get() == AlertEvent(kind: .generic, message: text))
        }
    }

    @Test func longTextIsCutToFitAtACharacterBoundary() throws {
        let text = String(repeating: "🔴 down\n", count: 2000)
        let event = try parse(text, type: "application/x-www-form-urlencoded").get()
        #expect(event.message.utf8.count <= 4096 && event.message.utf8.count > 4000)
        #expect(text.hasPrefix(event.message))
    }

    /// A template's `"monitor":"{{name}}"`, or `"heartbeat":"{{heartbeatJSON}}"` (rendered `[object Object]`), is not
    /// Uptime Kuma's shape, but the text beside it still makes a push (SPEC §2.2 step 3: 400 only without any) — an
    /// alert, never a Test that holds Uptime Kuma's check waiting. Objects of the shape with fields of the wrong
    /// type still get the shape's error (below).
    @Test func textBesideAMonitorOrHeartbeatThatIsNoObjectStillMakesAPush() throws {
        let alert = try parse("{\"monitor\":\"Shop\",\"msg\":\"[Shop] [🔴 Down] 503\"}", type: "application/json").get()
        #expect(alert == AlertEvent(kind: .generic, title: "", message: "[Shop] [🔴 Down] 503") && !alert.waitsForDelivery)
        let wrongType = parse("{\"heartbeat\":{\"status\":\"0\"},\"monitor\":{\"name\":\"A\"},\"msg\":\"x\"}", type: "application/json")
        #expect(wrongType == .failure(.invalidBody("heartbeat.status is not an integer")))
        let generic = try parse("{\"heartbeat\":\"[object Object]\",\"title\":\"Shop\",\"body\":\"down\"}", type: "text/plain").get()
        #expect(generic == AlertEvent(kind: .generic, title: "Shop", message: "down"))
    }

    // MARK: - 400 only for a body with no usable text, saying what and where

    @Test(arguments: [
        ("application/json", "", "empty body"),
        ("text/plain", " \n\t", "empty body"),
        ("application/json", "{\"title\" \"x\"}", "invalid JSON at byte 9: expected ':'"),
        ("application/json", "{\"title\":\"a\nb\"}", "invalid JSON at byte 11: control character in string"),
        ("application/json", "[]", "the JSON holds no object and no text"),
        ("application/json", "null", "the JSON holds no object and no text"),
        ("application/json", "42", "the JSON holds no object and no text"),
        ("application/json", "\"  \"", "the JSON string is empty"),
        ("application/json", "{\"other\":1}", "no title, body or msg field"),
        ("text/plain", "{\"other\":\"x\",\n\"n\":\"a\nb\"}", "no title, body or msg field"),
        ("application/json", "{\"heartbeat\":\"down\",\"monitor\":{}}", "heartbeat is not an object"),
        ("application/json", "{\"heartbeat\":{\"status\":\"0\"},\"monitor\":{\"name\":\"A\"}}", "heartbeat.status is not an integer")
    ])
    func bodiesWithNoUsableTextSayWhatIsWrong(type: String, body: String, reason: String) {
        #expect(parse(body, type: type) == .failure(.invalidBody(reason)))
    }

    @Test func notUTF8IsRefused() {
        let bytes: [UInt8] = [0x68, 0x69, 0xff, 0xfe]
        let request = HTTPRequest(method: "POST", path: "/wh/x", headers: ["content-type": "text/plain"], body: bytes)
        #expect(WebhookParser.parse(request) == .failure(.invalidBody("the body is not UTF-8 (byte 2)")))
    }

    @Test func otherMediaTypesAre415() {
        for type in ["application/xml", "image/png", "application/octet-stream"] {
            #expect(parse("<a/>", type: type) == .failure(.unsupportedMediaType))
        }
    }
}
