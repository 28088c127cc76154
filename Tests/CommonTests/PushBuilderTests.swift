import Common
import Testing

@Suite struct PushBuilderTests {
    let builder = PushBuilder(lateNotice: .seconds(120))

    /// LATE_NOTICE (SPEC §3) is "more than": a push sent exactly 120 s after its webhook says nothing, a millisecond
    /// later it says when the event was (a sub-millisecond notice counts its whole milliseconds only, as before).
    @Test func theLateNoticeStartsAfterExactlyLateNotice() {
        let event = AlertEvent(kind: .monitor, status: .down, monitorID: 1, monitorName: "API", message: "timeout")
        let acceptedAt: Int64 = 1_700_000_000_000
        #expect(builder.notification(for: event, timeSensitiveDown: false, acceptedAt: acceptedAt, now: acceptedAt + 120_000).bodySuffix == "")
        #expect(builder.notification(for: event, timeSensitiveDown: false, acceptedAt: acceptedAt, now: acceptedAt + 120_001).bodySuffix != "")
        let fractional = PushBuilder(lateNotice: .microseconds(120_000_500))
        #expect(fractional.notification(for: event, timeSensitiveDown: false, acceptedAt: acceptedAt, now: acceptedAt + 120_000).bodySuffix == "")
        #expect(fractional.notification(for: event, timeSensitiveDown: false, acceptedAt: acceptedAt, now: acceptedAt + 120_001).bodySuffix != "")
    }

    /// Issue 12 item 5: a monitor with no id groups by its name, and a very long name made the uncut thread-id
    /// alone push the payload past 4096 bytes (APNs answers PayloadTooLarge and the alert was dead-lettered).
    @Test func aVeryLongMonitorNameStillFitsAndGroupsByACutThreadID() throws {
        let name = String(repeating: "Ω", count: 3000)  // 6,000 bytes
        let event = AlertEvent(kind: .monitor, status: .down, monitorName: name, message: "Connection refused")
        let push = builder.notification(for: event, timeSensitiveDown: false, acceptedAt: 0, now: 0)
        let payload = APNsPayload.encode(push)
        #expect(payload.count <= 4096)
        let thread = try #require(push.threadID)
        #expect(thread.hasPrefix("monitor-ΩΩ") && thread.utf8.count <= "monitor-".utf8.count + 64)
        let parsed = try JSONParser.parse(payload)
        #expect(parsed["aps"]?["thread-id"]?.stringValue == thread)
        #expect(parsed["aps"]?["alert"]?["title"]?.stringValue?.hasSuffix("…") == true, "body, then title, cut to fit (SPEC §3)")
    }

    @Test func textCutKeepsWholeCharacters() {
        #expect(TextCut.prefix("héllo", maxBytes: 2) == "h")
        #expect(TextCut.prefix("héllo", maxBytes: 3) == "hé")
        #expect(TextCut.prefix("👍🏽ok", maxBytes: 7) == "")
        #expect(TextCut.prefix("short", maxBytes: 64) == "short")
    }
}
