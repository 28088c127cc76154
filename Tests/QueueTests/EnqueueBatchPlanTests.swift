import Common
import Testing

@testable import Queue

/// A whole enqueue batch's decisions (`EnqueuePlan.plan`, `reads(for:)`), without a database: head or pending,
/// the badge, folding past the cap into a stored or an arriving tail, refusals, healing and live counts.
@Suite struct EnqueueBatchPlanTests {
    typealias State = EnqueuePlan.DeviceState

    func alert(_ id: String, device: String = "D", monitor: Int? = nil, down: Bool = true) -> NewJob {
        NewJob(
            deviceID: device, publicID: id, payload: Array(#"{"k":"monitor","s":\#(down ? 0 : 1),"id":\#(monitor ?? 9)}"#.utf8),
            monitor: monitor.map { MonitorReport(key: "id:\($0)", isDown: down) })
    }

    func test(_ id: String, device: String = "D", text: String = "Uptime Kuma testing") -> NewJob {
        NewJob(deviceID: device, publicID: id, payload: Array(#"{"k":"test","m":"\#(text)"}"#.utf8), reportsOutcome: true)
    }

    @Test func theFirstJobOfAnIdleDeviceIsItsHeadAndTheRestWaitBehindIt() {
        let plan = EnqueuePlan.plan(
            [alert("a"), alert("b"), alert("c", device: "E")],
            devices: ["D": State(storedLive: 0, hasHead: false), "E": State(storedLive: 1, hasHead: true)], cap: 10)
        #expect(plan.rows.map(\.isHead) == [true, false, false])
        #expect(plan.results == [.queued, .queued, .queued])
        #expect(plan.liveCounts == ["D": 2, "E": 2])
        #expect(plan.healed.isEmpty)
    }

    @Test func aJobForADeviceThatIsGoneIsRefusedAndRecordsNothing() {
        let plan = EnqueuePlan.plan([alert("a", device: "X", monitor: 1)], devices: [:], cap: 10)
        #expect(plan == EnqueuePlan.Batch(results: [.deviceGone]))
    }

    @Test func eachRowCarriesTheBadgeAsOfItsAlertAndAMonitorKeepsItsLastWord() {
        let device = State(storedLive: 0, hasHead: false, downMonitors: ["id:1"])
        let jobs = [alert("a", monitor: 2), alert("b", monitor: 1, down: false), alert("c", monitor: 2, down: false), alert("d", monitor: 3)]
        let plan = EnqueuePlan.plan(jobs, devices: ["D": device], cap: 10)
        #expect(plan.rows.map(\.badge) == [2, 1, 0, 1])
        #expect(
            Set(plan.monitorStates) == [
                .init(device: "D", monitor: "id:2", down: false), .init(device: "D", monitor: "id:1", down: false),
                .init(device: "D", monitor: "id:3", down: true)
            ])
        #expect(plan.monitorStates.count == 3)
    }

    /// A monitor whose stored "down" is fresh and is reported down again is not written: its badge still counts it.
    /// Reported up, or down again with a stale row, or new, it is written.
    @Test func downAgainForAFreshlyStoredDownMonitorWritesNothingAndEverythingElseIsWritten() {
        let device = State(storedLive: 0, hasHead: false, downMonitors: ["id:1", "id:2", "id:3"], freshDownMonitors: ["id:1", "id:2"])
        let jobs = [
            alert("a", monitor: 1), alert("b", monitor: 2, down: false), alert("c", monitor: 3), alert("d", monitor: 4),
            alert("e", monitor: 1, down: false), alert("f", monitor: 1)
        ]
        let plan = EnqueuePlan.plan(jobs, devices: ["D": device], cap: 10)
        #expect(plan.rows.map(\.badge) == [3, 2, 2, 3, 2, 3], "the badge counts the monitors left unwritten")
        #expect(
            plan.monitorStates == [
                .init(device: "D", monitor: "id:2", down: false), .init(device: "D", monitor: "id:3", down: true),
                .init(device: "D", monitor: "id:4", down: true)
            ], "1 is down again as stored (its up in between is not its last word), 2 came back, 3's row is stale, 4 is new")
        let otherDevice = EnqueuePlan.plan(
            [alert("g", device: "E", monitor: 1)], devices: ["D": device, "E": State(storedLive: 0, hasHead: false)], cap: 10)
        #expect(otherDevice.monitorStates == [.init(device: "E", monitor: "id:1", down: true)], "freshness is the device's own")
    }

    @Test func aStoredDownStaysFreshTenMinutesOrAHundredthOfAShorterRetention() {
        #expect(EnqueuePlan.monitorRefresh(retention: .seconds(30 * 86_400)) == .seconds(600), "TOMBSTONE_RETENTION's default")
        #expect(EnqueuePlan.monitorRefresh(retention: .seconds(3600)) == .seconds(36))
    }

    @Test func pastTheCapAlertsFoldIntoTheStoredTailOnceWithTheLastBadge() {
        let tail = EnqueuePlan.StoredTail(id: 41, folded: FoldedAlerts())
        let device = State(storedLive: 2, hasHead: true, tail: tail)
        let plan = EnqueuePlan.plan([alert("a", monitor: 1), alert("b", monitor: 2)], devices: ["D": device], cap: 2)
        #expect(plan.results == [.merged, .merged])
        #expect(plan.rows.isEmpty)
        #expect(plan.tailFolds.count == 1)
        #expect(plan.tailFolds.first?.id == 41)
        #expect(plan.tailFolds.first?.folded.count == 2)
        #expect(plan.tailFolds.first?.badge == 2)
        #expect(plan.liveCounts.isEmpty, "a fold adds no live job")
    }

    @Test func pastTheCapAnAlertFoldsIntoTheBatchsOwnNewestWaitingRow() {
        let plan = EnqueuePlan.plan([alert("head"), alert("a"), alert("b", monitor: 5)], devices: ["D": State(storedLive: 0, hasHead: false)], cap: 2)
        #expect(plan.results == [.queued, .queued, .merged])
        #expect(plan.rows.map(\.job.publicID) == ["head", "a"])
        #expect(plan.rows[1].folded.count == 1)
        #expect(plan.rows[1].badge == 1, "the tail's push ends with the folded alert: its badge")
        #expect(plan.rows[0].folded.isEmpty, "never into the head")
    }

    /// A tail a digest in flight carries (at or below the device's seal) is never folded into: the alert waits in a
    /// new row past the cap (cap + 1), and the next alert folds into that row. The safety net: only a deliverer on a
    /// larger DEVICE_QUEUE_MAX than ingest's seals the job ingest folds into (`DigestCarry`).
    @Test func pastTheCapASealedTailGetsANewRowThatTheNextAlertFoldsInto() {
        let sealed = EnqueuePlan.StoredTail(id: 900, position: 7, folded: FoldedAlerts())
        let device = State(storedLive: 2, hasHead: true, tail: sealed, sealedThrough: 7)
        let plan = EnqueuePlan.plan([alert("a", monitor: 1), alert("b", monitor: 2)], devices: ["D": device], cap: 2)
        #expect(plan.results == [.queued, .merged])
        #expect(plan.tailFolds.isEmpty, "nothing folded into the sealed tail, whose id (900) is past the seal but not its position")
        #expect(plan.rows.map(\.job.publicID) == ["a"])
        #expect(plan.rows.first?.isHead == false)
        #expect(plan.rows.first?.folded.count == 1)
        #expect(plan.liveCounts == ["D": 3], "the cap plus one while that digest is in flight")
    }

    @Test func aTailPastTheSealIsFoldedInto() {
        let open = EnqueuePlan.StoredTail(id: 12, position: 8, folded: FoldedAlerts())
        let plan = EnqueuePlan.plan([alert("a")], devices: ["D": State(storedLive: 3, hasHead: true, tail: open, sealedThrough: 7)], cap: 2)
        #expect(plan.results == [.merged])
        #expect(plan.tailFolds.map(\.id) == [12])
    }

    @Test func withNoTailOrAnUnreadablePayloadTheAlertIsRefusedForThisDeviceOnly() {
        let full = EnqueuePlan.plan([alert("a")], devices: ["D": State(storedLive: 1, hasHead: true)], cap: 1)
        #expect(full.results == [.deviceFull])
        var unreadable = alert("b")
        unreadable.payload = Array("not json".utf8)
        let device = State(storedLive: 1, hasHead: true, tail: .init(id: 3, folded: FoldedAlerts()))
        #expect(EnqueuePlan.plan([unreadable], devices: ["D": device], cap: 1).results == [.deviceFull])
    }

    @Test func aWaitingTestRowIsNeverATailAndTheSameTestAgainJoinsIt() {
        let jobs = [alert("head"), test("t1"), test("t2"), test("t3", text: "Certificate expires"), alert("x"), alert("y")]
        let plan = EnqueuePlan.plan(jobs, devices: ["D": State(storedLive: 0, hasHead: false)], cap: 3)
        #expect(plan.results == [.queued, .queued, .sameAsWaitingTest(publicID: "t1"), .queuedAsAlert, .merged, .merged])
        #expect(plan.rows.map(\.waits) == [false, true, false])
        #expect(plan.rows[1].folded.isEmpty)
        #expect(plan.rows[2].folded.count == 2, "folded into the Test-shaped notice kept as an alert")

        // The waiting Test is the newest row when the cap is reached: the alert folds into the alert before it.
        let behind = EnqueuePlan.plan(
            [alert("head"), alert("a"), test("t"), alert("x")], devices: ["D": State(storedLive: 0, hasHead: false)], cap: 3)
        #expect(behind.results == [.queued, .queued, .queued, .merged])
        #expect(behind.rows.map(\.folded.count) == [0, 1, 0])
    }

    @Test func aCountLeftHighWithoutAHeadIsHealedAndCountedAfresh() {
        let plan = EnqueuePlan.plan(
            [alert("a")], devices: ["D": State(storedLive: 5, hasHead: false), "E": State(storedLive: 3, hasHead: false)], cap: 2)
        #expect(plan.results == [.queued])
        #expect(plan.healed == ["D", "E"])
        #expect(plan.liveCounts == ["D": 1, "E": 0])
    }

    @Test func theStoreReadsWaitingTestsAndTailsOnlyWhereTheyMayMatter() {
        let devices = ["D": State(storedLive: 2, hasHead: true), "E": State(storedLive: 0, hasHead: false), "F": State(storedLive: 1, hasHead: true)]
        let jobs = [test("t", device: "D"), test("u", device: "E"), alert("a", device: "F"), alert("b", device: "F"), alert("c", device: "X")]
        let reads = EnqueuePlan.reads(for: jobs, devices: devices, cap: 2)
        #expect(reads.waitingTests == ["D"], "a device without a head has no live job to wait on")
        #expect(reads.tails == ["D", "F"], "2 + 1 and 1 + 2 pass the cap of 2; 0 + 1 does not")
        #expect(EnqueuePlan.reads(for: jobs, devices: devices, cap: .max).tails.isEmpty, "no cap, no fold")
    }
}
