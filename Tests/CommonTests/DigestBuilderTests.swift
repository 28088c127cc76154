import Common
import Testing

@Suite struct DigestBuilderTests {
    let builder = DigestBuilder(lateNotice: .seconds(120))

    func down(_ id: Int, _ name: String) -> AlertEvent { AlertEvent(kind: .monitor, status: .down, monitorID: id, monitorName: name, message: "x") }
    func up(_ id: Int, _ name: String) -> AlertEvent { AlertEvent(kind: .monitor, status: .up, monitorID: id, monitorName: name, message: "ok") }

    @Test func countsAlertsAndListsThemInOrder() {
        let digest = builder.digest([down(1, "DB"), down(2, "Web"), up(3, "Cache")], timeSensitiveDown: false, firstAcceptedAt: 0, now: 0)
        #expect(digest.title == "3 monitors changed: 2 down, 1 up")
        #expect(digest.body == "DB is down · Web is down · Cache is up")
        #expect(digest.threadID == "kumapush-digest" && digest.interruptionLevel == .active)
    }

    @Test func oneMonitorGoingDownAndUpIsTwoAlertsFromOneMonitor() {
        let digest = builder.digest([down(1, "DB"), up(1, "DB"), down(2, "Web")], timeSensitiveDown: false, firstAcceptedAt: 0, now: 0)
        #expect(digest.title == "3 alerts from 2 monitors: 2 down, 1 up")
        #expect(digest.body == "DB is down · DB is up · Web is down")
    }

    @Test func anyDownAlertMakesItTimeSensitiveOnlyForDevicesThatAskedForIt() {
        let events = [up(1, "A"), down(2, "B")]
        #expect(builder.digest(events, timeSensitiveDown: true, firstAcceptedAt: 0, now: 0).interruptionLevel == .timeSensitive)
        #expect(builder.digest(events, timeSensitiveDown: false, firstAcceptedAt: 0, now: 0).interruptionLevel == .active)
        #expect(builder.digest([up(1, "A"), up(2, "B")], timeSensitiveDown: true, firstAcceptedAt: 0, now: 0).interruptionLevel == .active)
    }

    @Test func aListTooLongForAPNsShowsEachMonitorsLatestStateFirstAndCountsTheRest() {
        var events: [AlertEvent] = []
        for id in 0..<120 { events.append(down(id, "Monitor with a rather long descriptive name number \(id)")) }
        for id in 0..<40 { events.append(up(id, "Monitor with a rather long descriptive name number \(id)")) }
        let digest = builder.digest(events, timeSensitiveDown: false, firstAcceptedAt: 0, now: 0)
        #expect(digest.title == "160 alerts from 120 monitors: 120 down, 40 up")
        #expect(APNsPayload.encode(digest).count <= 4096)
        #expect(!digest.body.contains("…") || digest.body.contains("more"))
        let match = digest.body.split(separator: " … and ").last.flatMap { Int($0.split(separator: " ").first ?? "") }
        let shown = digest.body.components(separatedBy: " · ").count
        #expect(match.map { $0 + shown } == 160, "shown entries plus the count add up to every alert")
        // Latest state per monitor: monitor 0 is shown as up (its last state), never as down.
        #expect(!digest.body.contains("number 0 is down"))
    }

    @Test func testsAndGenericPushesAreListedByTheirText() {
        let digest = builder.digest(
            [.test("My Webhook Alert (1) Testing"), AlertEvent(kind: .generic, title: "Backup done", message: "ok")],
            timeSensitiveDown: false, firstAcceptedAt: 0, now: 0)
        #expect(digest.title == "2 alerts")
        #expect(digest.body == "My Webhook Alert (1) Testing · Backup done")
    }

    @Test func aLateDigestSaysWhenItsFirstAlertHappened() {
        let digest = builder.digest(
            [down(1, "A"), down(2, "B")], timeSensitiveDown: false, firstAcceptedAt: 1_789_905_780_000,
            now: 1_789_905_780_000 + 300_000)
        #expect(digest.fullBody.hasSuffix(" · delayed, event at 12:03 UTC"))
    }

    /// Issue 20: a 1,000-monitor incident in one push: counted by state in the title, as many names as fit in
    /// order, and how many more.
    @Test func aThousandMonitorIncidentIsCountedByStateAndListedAsFarAsItFits() {
        let events = (0..<998).map { down($0, "Service \($0)") } + [up(998, "Service 998"), up(999, "Service 999")]
        let digest = builder.digest(events, timeSensitiveDown: false, firstAcceptedAt: 0, now: 0)
        #expect(digest.title == "1,000 monitors changed: 998 down, 2 up")
        #expect(APNsPayload.encode(digest).count <= 4096)
        #expect(digest.body.hasPrefix("Service 0 is down · Service 1 is down · Service 2 is down"))
        let shown = digest.body.components(separatedBy: " · ").count
        #expect(digest.body.hasSuffix(" … and \(CountText.grouped(1000 - shown)) more"))
        #expect(shown > 50, "fills the 4 KiB")
    }

    @Test func foldedAlertsKeptOnlyAsCountsAreInTheTitleAndTheRest() {
        let digest = builder.digest(
            [down(1, "DB"), up(2, "Web")], uncounted: StatusTally(down: 1_200, up: 3),
            timeSensitiveDown: true, firstAcceptedAt: 0, now: 0)
        #expect(digest.title == "1,205 alerts: 1,201 down, 4 up", "alerts kept only as counts may repeat a monitor")
        #expect(digest.body == "DB is down · Web is up … and 1,203 more")
        #expect(digest.interruptionLevel == .timeSensitive)
    }

    /// The badge is part of the payload: a digest sized without it could be cut again when encoded, losing the count
    /// of the alerts not listed.
    @Test(arguments: [0, 7, 99, 12_345, 1_000_000]) func aDigestWithABadgeIsEncodedWholeWithItsCount(badge: Int) throws {
        let events = (0..<998).map { down($0, "Service \($0)") } + [up(998, "Service 998"), up(999, "Service 999")]
        let digest = builder.digest(events, timeSensitiveDown: false, firstAcceptedAt: 0, now: 0, badge: badge)
        let payload = APNsPayload.encode(digest)
        #expect(payload.count <= 4096 && digest.badge == badge)
        let aps = try JSONParser.parse(payload)["aps"]
        #expect(aps?["badge"]?.intValue == badge)
        #expect(aps?["alert"]?["body"]?.stringValue == digest.body, "encoded whole, not cut again")
        #expect(digest.body.hasSuffix(" more"))
    }

    @Test func countsAreGroupedByThousands() {
        #expect([0, 7, 999, 1000, 12_345, 1_234_567].map(CountText.grouped) == ["0", "7", "999", "1,000", "12,345", "1,234,567"])
    }
}
