import Common
import Foundation
import Queue
import TestSupport
import Testing

/// SPEC §3 `aps.badge`: each job carries how many of its device's monitors were down as of its alert, recorded in
/// the same transaction that stores it.
@Suite struct BadgeTests {
    let t0 = TestDatabase.t0

    func job(_ device: String, _ event: AlertEvent) -> NewJob {
        NewJob(deviceID: device, publicID: UUID().uuidString, payload: event.jobPayload, monitor: MonitorReport(event))
    }

    func monitor(_ id: Int, _ status: AlertEvent.Status) -> AlertEvent {
        AlertEvent(kind: .monitor, status: status, monitorID: id, monitorName: "M\(id)", message: "")
    }

    /// Badges of each device's jobs in acceptance order, read the way the deliverer reads them (claim, deliver).
    func badges(_ db: TestDatabase) throws -> [String: [Int?]] {
        var result: [String: [Int?]] = [:]
        while case let heads = try db.store.claim(worker: "w", limit: 100, now: t0 + 10_000_000, lease: .seconds(60)), !heads.isEmpty {
            for head in heads { result[head.deviceID, default: []].append(head.badge) }
            _ = try db.store.finish(heads.map { JobOutcome($0, kind: .delivered) }, worker: "w", now: t0)
        }
        return result
    }

    func badges(_ db: TestDatabase, _ device: String) throws -> [Int?] { try badges(db)[device] ?? [] }

    @Test(arguments: StoreKind.allCases) func downAndUpAlertsCountPerDeviceInOrder(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind, monitorRetention: .seconds(3600))
        let phone = try db.device(1)
        let other = try db.device(2)
        let events = [monitor(1, .down), monitor(2, .down), monitor(3, .down), monitor(2, .up)]
        _ = try db.store.enqueue([job(other, monitor(9, .down))], now: t0, ttl: .seconds(60))
        _ = try db.store.enqueue(events.map { job(phone, $0) }, now: t0, ttl: .seconds(60))
        let all = try badges(db)
        #expect(all[phone] == [1, 2, 3, 2], "another device's monitors do not count")
        #expect(all[other] == [1])
    }

    /// A replayed dead letter goes behind every job its device has, so it carries the device's count now: the one
    /// it was first stored with would set the phone's badge back (no badge at all left it unset).
    @Test(arguments: StoreKind.allCases) func aReplayedDeadLetterKeepsItsBadge(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind, monitorRetention: .seconds(3600))
        let phone = try db.device(1)
        _ = try db.store.enqueue([job(phone, monitor(1, .down)), job(phone, monitor(2, .down))], now: t0, ttl: .seconds(60))
        let head = try #require(try db.claim().first)
        _ = try db.store.finish([JobOutcome(head, kind: .deadLetter(reason: "BadDeviceToken"))], worker: "w1", now: t0)
        #expect(try db.store.replayDeadLetters(DeadLetterFilter(), limit: 10, now: t0, ttl: .seconds(60)) == 1)
        #expect(try badges(db, phone) == [2, 2], "the second alert, then the first one replayed behind it, as of now")
    }

    @Test(arguments: StoreKind.allCases) func pendingMaintenanceTestsAndGenericPushesCarryTheCurrentCount(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind, monitorRetention: .seconds(3600))
        let phone = try db.device(1)
        let events = [
            monitor(1, .down), monitor(1, .pending), monitor(2, .maintenance), .test("test"),
            AlertEvent(kind: .generic, title: "Backup", message: "done"), monitor(1, .up)
        ]
        _ = try db.store.enqueue(events.map { job(phone, $0) }, now: t0, ttl: .seconds(60))
        #expect(try badges(db, phone) == [1, 1, 1, 1, 1, 0], "an UP that ends the last outage sends 0, clearing the badge")
    }

    @Test(arguments: StoreKind.allCases) func aMonitorWithoutAnIDIsKeptAsAHashNeverItsName(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind, monitorRetention: .seconds(3600))
        let phone = try db.device(1)
        let nameless = AlertEvent(kind: .monitor, status: .down, monitorName: "Secret internal host", message: "")
        _ = try db.store.enqueue([job(phone, nameless)], now: t0, ttl: .seconds(60))
        let rows = try db.kind.rawQuery(db.location, "SELECT monitor FROM monitor_states")
        #expect(rows.count == 1 && !rows[0][0].contains("Secret"))
        #expect(try badges(db, phone) == [1])
    }

    @Test(arguments: StoreKind.allCases) func aMonitorSilentForTheRetentionIsForgottenAndADeletedDevicesStatesGo(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind, monitorRetention: .seconds(3600))
        let phone = try db.device(1)
        _ = try db.store.enqueue([job(phone, monitor(1, .down))], now: t0, ttl: .seconds(60))
        _ = try db.store.enqueue([job(phone, monitor(2, .down))], now: t0 + 3_600_001, ttl: .seconds(60))
        #expect(try badges(db, phone) == [1, 1], "monitor 1 was last heard of over an hour before")
        #expect(try db.store.purgeTombstones(before: t0 + 1) == 0)
        #expect(try db.kind.rawQuery(db.location, "SELECT count(*) FROM monitor_states")[0][0] == "1")
        _ = try db.store.deleteDevice(id: phone, now: t0)
        #expect(try db.kind.rawQuery(db.location, "SELECT count(*) FROM monitor_states")[0][0] == "0")
    }

    /// A monitor reported down again while its stored "down" is fresh (`EnqueuePlan.monitorRefresh`: 36 s for an hour's
    /// retention) leaves its row as it is; once the row is older than that, the report writes it again.
    @Test(arguments: StoreKind.allCases) func downAgainRewritesTheMonitorsRowOnlyOnceItIsNoLongerFresh(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind, monitorRetention: .seconds(3600))
        let phone = try db.device(1)
        let writtenAt = { try db.kind.rawQuery(db.location, "SELECT updated_at FROM monitor_states WHERE monitor = 'id:1'").first?.first }
        for (offset, expected) in [(0, t0), (36_000, t0), (36_001, t0 + 36_001), (40_000, t0 + 36_001)] {
            _ = try db.store.enqueue([job(phone, monitor(1, .down))], now: t0 + Int64(offset), ttl: .seconds(60))
            #expect(try writtenAt() == String(expected), "reported down at +\(offset) ms")
        }
        _ = try db.store.enqueue([job(phone, monitor(1, .up))], now: t0 + 40_001, ttl: .seconds(60))
        #expect(try db.kind.rawQuery(db.location, "SELECT updated_at FROM monitor_states")[0][0] == String(t0 + 40_001), "up is written")
        #expect(try badges(db, phone) == [1, 1, 1, 1, 0])
    }

    /// A monitor kept down by Uptime Kuma's resends stays in the badge past the retention since its first report, and
    /// once they stop it counts until at least the retention less the refresh (36 s) after the last one, and no
    /// longer than the retention. Its last report is one left unwritten (its row 30 s older), as most of them are.
    @Test(arguments: StoreKind.allCases) func aMonitorKeptDownByResendsCountsUntilTheRetentionAfterItsLastReport(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind, monitorRetention: .seconds(3600))
        let phone = try db.device(1)
        let hour: Int64 = 3_600_000
        let lastReport = t0 + hour + 630_000
        for at in stride(from: t0, through: lastReport, by: 30_000) {
            _ = try db.store.enqueue([job(phone, monitor(1, .down))], now: at, ttl: .seconds(60))
        }
        let probe = AlertEvent(kind: .generic, title: "Backup", message: "done")
        for at in [t0 + hour + 1, lastReport + hour - 36_000, lastReport + hour + 1] {
            _ = try db.store.enqueue([job(phone, probe)], now: at, ttl: .seconds(60))
        }
        let all = try badges(db, phone)
        #expect(all.count == 145)
        #expect(Array(all.suffix(3)) == [1, 1, 0], "counted an hour after its first report and 36 s short of one after its last")
    }

    @Test(arguments: StoreKind.allCases) func aJobThatAlertsFoldIntoCarriesTheBadgeOfTheLastOne(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind, monitorRetention: .seconds(3600))
        let phone = try db.device(1)
        _ = try db.store.enqueue((1...5).map { job(phone, monitor($0, .down)) }, now: t0, ttl: .seconds(60), deviceCap: 2)
        let pending = try db.store.pendingJobs(deviceID: phone, limit: 10)
        #expect(pending.count == 1 && pending[0].folded.count == 3)
        #expect(pending[0].badge == 5)
    }

    /// A Test job waiting on its outcome is never the tail, so alerts past the cap fold into an older job, which then
    /// goes out before it. It takes the fold's badge too: with the badge of its own moment it would be the last push,
    /// and the phone would keep a count of monitors that came back since. Stored in an earlier batch, and in the same.
    @Test(arguments: StoreKind.allCases) func aWaitingTestJobTakesTheBadgeOfAlertsFoldedAheadOfIt(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind, monitorRetention: .seconds(3600))
        let (earlier, same) = (try db.device(1), try db.device(2))
        let press = { (device: String) in
            NewJob(deviceID: device, publicID: UUID().uuidString, payload: AlertEvent.test("test").jobPayload, reportsOutcome: true)
        }
        _ = try db.store.enqueue([job(earlier, monitor(1, .down)), job(earlier, monitor(2, .up))], now: t0, ttl: .seconds(60), deviceCap: 3)
        _ = try db.store.enqueue([press(earlier)], now: t0, ttl: .seconds(60), deviceCap: 3)
        #expect(try db.store.enqueue([job(earlier, monitor(1, .up))], now: t0, ttl: .seconds(60), deviceCap: 3) == [.merged])
        #expect(
            try db.store.enqueue(
                [job(same, monitor(1, .down)), job(same, monitor(2, .up)), press(same), job(same, monitor(1, .up))], now: t0,
                ttl: .seconds(60), deviceCap: 3
            ).last == .merged)
        let all = try badges(db)
        #expect(all[earlier] == [1, 0, 0], "the head, the tail with the folded UP, then the Test job")
        #expect(all[same] == [1, 0, 0])
    }
}
