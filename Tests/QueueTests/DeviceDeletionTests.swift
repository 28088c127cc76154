import Common
import Foundation
import TestSupport
import Testing

@testable import Queue

/// Device deletion decided once (issue 38): what each way a device leaves reports and keeps, the order of the
/// steps, and that a device not found is left alone; then the same rules on both stores.
@Suite struct DeviceDeletionTests {
    @Test func eachWayADeviceLeavesReportsItsOutcomeAndKeepsItsTombstone() {
        let failed = ReportedOutcome(kind: .failed, reason: "DeviceDeleted")
        #expect(DeviceDeletion.deletedByApp(at: 7).steps == [.lockDevice, .reportWaitingTests(failed, at: 7), .deleteDeviceAndJobs])
        #expect(
            DeviceDeletion.erased(reason: "erasure request", at: 7).steps == [
                .lockDevice, .reportWaitingTests(failed, at: 7), .recordTombstone(reason: "erasure request", at: 7), .deleteDeviceAndJobs
            ])
        #expect(
            DeviceDeletion.unregistered(reason: "Unregistered", at: 7).steps == [
                .lockDevice, .reportWaitingTests(ReportedOutcome(kind: .unregistered, reason: "Unregistered"), at: 7),
                .recordTombstone(reason: "Unregistered", at: 7), .deleteDeviceAndJobs
            ])
    }

    @Test func theStepsAreAppliedInOrderToTheDevice() throws {
        let dialect = RecordingDialect(exists: true)
        #expect(try DeviceDeletion.erased(reason: "r", at: 7).apply(to: "d", in: dialect))
        #expect(dialect.calls == ["lock d", "report d failed DeviceDeleted 7", "tombstone d r 7", "delete d"])
    }

    @Test func aDeviceNotFoundIsNeitherReportedNorTombstonedNorDeleted() throws {
        let dialect = RecordingDialect(exists: false)
        #expect(try !DeviceDeletion.unregistered(reason: "Unregistered", at: 7).apply(to: "d", in: dialect))
        #expect(dialect.calls == ["lock d"])
    }

    /// An operator's erase on either store: the waiting Test request is told, the jobs (live and dead) go, the
    /// tombstone keeps the operator's reason; a second erase finds nothing and changes nothing.
    @Test(arguments: StoreKind.allCases) func anEraseTellsTheWaitingTestDeletesEveryJobAndKeepsATombstone(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let device = try db.device(1)
        try db.enqueue(device, "head", "dead")
        let test = NewJob(deviceID: device, publicID: UUID().uuidString, payload: Array("test".utf8), reportsOutcome: true)
        _ = try db.store.enqueue([test], now: TestDatabase.t0, ttl: .seconds(3600))
        let head = try #require(try db.claim().first)
        _ = try db.store.finish([.dead(head, "BadTopic")], worker: "w1", now: TestDatabase.t0)
        let support = try #require(db.store as? any SupportQueries)

        #expect(try support.eraseDevice(id: device, reason: "erasure request", now: TestDatabase.t0 + 5))
        #expect(try db.store.reportedOutcome(publicID: test.publicID) == ReportedOutcome(kind: .failed, reason: "DeviceDeleted"))
        #expect(try db.store.tombstone(deviceID: device) == Tombstone(deviceID: device, reason: "erasure request", removedAt: TestDatabase.t0 + 5))
        #expect(try db.store.device(id: device) == nil)
        #expect(try db.store.stats().jobsByState.values.reduce(0, +) == 0, "live jobs and the dead letter went with it")

        #expect(try !support.eraseDevice(id: device, reason: "again", now: TestDatabase.t0 + 9))
        #expect(try db.store.tombstone(deviceID: device)?.reason == "erasure request")
    }

    /// The entry point `finish` calls when APNs unregisters a token, on either store: the waiting Test request hears
    /// APNs' reason, and with a tombstone reason given the device's URL is tombstoned in the same transaction.
    @Test(arguments: StoreKind.allCases) func theStoresEntryPointTombstonesWhenAsked(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let device = try db.device(1)
        try db.enqueue(device, "head")
        let test = NewJob(deviceID: device, publicID: UUID().uuidString, payload: Array("test".utf8), reportsOutcome: true)
        _ = try db.store.enqueue([test], now: TestDatabase.t0, ttl: .seconds(3600))
        let deletion = DeviceDeletion.unregistered(reason: "Unregistered", at: TestDatabase.t0)
        let deleted: Bool
        switch db.store {
        case let store as SQLiteStore:
            deleted = try store.write { db in try deletion.apply(to: device, in: store.deletion(in: db)) }
        case let store as PostgresStore:
            deleted = try store.write { db in try deletion.apply(to: device, in: store.deletion(in: db)) }
        default:
            Issue.record("a store of an unknown kind")
            return
        }
        #expect(deleted)
        #expect(try db.store.reportedOutcome(publicID: test.publicID) == ReportedOutcome(kind: .unregistered, reason: "Unregistered"))
        #expect(try db.store.tombstone(deviceID: device)?.reason == "Unregistered")
        #expect(try db.store.stats().jobsByState.values.reduce(0, +) == 0)
    }
}

/// Records the calls `DeviceDeletion.apply` makes, for a device that exists or not.
private final class RecordingDialect: DeviceDeletionDialect {
    let exists: Bool
    private(set) var calls: [String] = []

    init(exists: Bool) { self.exists = exists }

    func lockDevice(_ device: String) -> Bool {
        calls.append("lock \(device)")
        return exists
    }

    func reportWaitingTests(of device: String, _ outcome: ReportedOutcome, at: Int64) {
        calls.append("report \(device) \(outcome.kind.rawValue) \(outcome.reason) \(at)")
    }

    func recordTombstone(of device: String, reason: String, at: Int64) { calls.append("tombstone \(device) \(reason) \(at)") }

    func deleteDeviceAndJobs(_ device: String) -> Bool {
        calls.append("delete \(device)")
        return exists
    }
}
