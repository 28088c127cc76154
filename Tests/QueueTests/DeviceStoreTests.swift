import Common
import Queue
import TestSupport
import Testing

@Suite struct DeviceStoreTests {

    let token = String(repeating: "ab", count: 32)

    @Test(arguments: StoreKind.allCases) func registeringAKnownTokenKeepsTheIdAndReplacesTheAuthToken(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let first = try db.store.registerDevice(token: token, authTokenHash: AuthToken.hash("old"), now: TestDatabase.t0) { try DeviceID.generate() }
        #expect(first.created)
        #expect(DeviceID.isWellFormed(first.device.id))
        #expect(first.device.dateAdded == TestDatabase.t0 && first.device.lastSuccessfulNotification == nil)
        #expect(first.device.downNotificationLevel == .normal && first.device.lastDeliveryError == "")

        let again = try db.store.registerDevice(token: token, authTokenHash: AuthToken.hash("new"), now: TestDatabase.t0 + 5000) {
            try DeviceID.generate()
        }
        #expect(!again.created)
        #expect(again.device.id == first.device.id)
        #expect(again.device.dateAdded == TestDatabase.t0)
        let stored = try #require(try db.store.device(id: first.device.id))
        #expect(AuthToken.matches("new", storedHash: stored.authTokenHash))
        #expect(!AuthToken.matches("old", storedHash: stored.authTokenHash))
    }

    /// `import-devices --dry-run` asks what `importDevice` would skip: an id or a token already here.
    @Test(arguments: StoreKind.allCases) func hasDeviceFindsAnIdOrATokenAsTheImportWould(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let id = try db.device(1)
        let storedToken = String(format: "%064x", 1)
        let otherToken = String(repeating: "cd", count: 32)
        #expect(try db.store.hasDevice(id: id, orToken: otherToken))
        #expect(try db.store.hasDevice(id: "Unknown_______", orToken: storedToken))
        #expect(try !db.store.hasDevice(id: "Unknown_______", orToken: otherToken))
        let device = Device(id: "Unknown_______", token: otherToken, authTokenHash: "h", dateAdded: 0)
        #expect(try db.store.importDevice(device))
        #expect(try db.store.hasDevice(id: "Unknown_______", orToken: otherToken))
    }

    @Test(arguments: StoreKind.allCases) func aCollidingFreshIdIsRetriedWithAnother(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let existing = try db.device(1)
        var candidates = [existing, "FRESHid_______"]
        let registration = try db.store.registerDevice(token: token, authTokenHash: "h", now: TestDatabase.t0) { candidates.removeFirst() }
        #expect(registration.created && registration.device.id == "FRESHid_______")
    }

    @Test(arguments: StoreKind.allCases) func updateChangesTokenAndLevelAndDetectsConflicts(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let a = try db.device(1)
        let b = try db.device(2)
        let newToken = String(repeating: "cd", count: 40)
        let updated = try #require(try db.store.updateDevice(id: a, token: newToken, level: .timeSensitive))
        #expect(updated.token == newToken && updated.downNotificationLevel == .timeSensitive)
        let levelOnly = try #require(try db.store.updateDevice(id: a, token: nil, level: .normal))
        #expect(levelOnly.token == newToken && levelOnly.downNotificationLevel == .normal)

        let error = #expect(throws: StoreError.self) { _ = try db.store.updateDevice(id: b, token: newToken, level: nil) }
        #expect(error?.code == .tokenConflict)
        #expect(try db.store.updateDevice(id: "NoSuchDevice__", token: nil, level: .normal) == nil)
    }

    @Test(arguments: StoreKind.allCases) func deleteRemovesTheDeviceAndItsJobsWithoutATombstone(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let a = try db.device(1)
        let b = try db.device(2)
        // Every kind of job a device has: a dead letter, a head being delivered, jobs waiting behind it.
        try db.enqueue(a, "a0")
        let a0 = try #require(try db.claim().first)
        _ = try db.store.finish([.dead(a0, "BadDeviceToken")], worker: "w1", now: TestDatabase.t0)
        try db.enqueue(a, "a1", "a2", "a3")
        #expect(try db.claim().map(\.label) == ["a1"])
        try db.enqueue(b, "b1")
        #expect(try db.store.deleteDevice(id: a, now: TestDatabase.t0))
        #expect(try db.store.device(id: a) == nil)
        #expect(try db.store.tombstone(deviceID: a) == nil)
        #expect(try db.store.liveJobCount() == 1)
        #expect(try db.kind.rawQuery(db.location, "SELECT count(*) FROM jobs WHERE device_id = '\(a)'") == [["0"]])
        #expect(try db.store.countDeadLetters(DeadLetterFilter()) == 0)
        #expect(try !db.store.deleteDevice(id: a, now: TestDatabase.t0))
        let remaining = try db.store.claim(worker: "w", limit: 10, now: TestDatabase.t0, lease: .seconds(60))
        #expect(remaining.map(\.label) == ["b1"])
    }

    @Test(arguments: StoreKind.allCases) func tombstonesArePurgedAfterRetention(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let a = try db.device(1)
        try db.enqueue(a, "a1")
        let job = try #require(try db.store.claim(worker: "w", limit: 1, now: TestDatabase.t0, lease: .seconds(60)).first)
        _ = try db.store.finish(
            [JobOutcome(job, kind: .removeDevice(reason: "Unregistered"))],
            worker: "w", now: TestDatabase.t0 + 10)
        #expect(try db.store.tombstone(deviceID: a) == Tombstone(deviceID: a, reason: "Unregistered", removedAt: TestDatabase.t0 + 10))
        #expect(try db.store.purgeTombstones(before: TestDatabase.t0 + 10) == 0)
        #expect(try db.store.purgeTombstones(before: TestDatabase.t0 + 11) == 1)
        #expect(try db.store.tombstone(deviceID: a) == nil)
    }

    /// A 410 answers the token the push went to. The app may have registered a new token meanwhile (PATCH): then the
    /// device must stay (removing it breaks every monitor's webhook URL), and the job goes back, its attempt not
    /// counted, to be claimed again with the new token.
    @Test(arguments: StoreKind.allCases) func aGoneTokenTheAppReplacedMeanwhileKeepsTheDevice(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let a = try db.device(1)
        try db.enqueue(a, "a1")
        let job = try #require(try db.store.claim(worker: "w", limit: 1, now: TestDatabase.t0, lease: .seconds(60)).first)
        let newToken = String(repeating: "ab", count: 32)
        _ = try db.store.updateDevice(id: a, token: newToken, level: nil)
        let applied = try db.store.finish(
            [JobOutcome(job, kind: .removeDevice(reason: "Unregistered"))], worker: "w", now: TestDatabase.t0 + 10)
        #expect(applied == [true])
        #expect(try db.store.device(id: a) != nil)
        #expect(try db.store.tombstone(deviceID: a) == nil)
        let again = try db.store.claim(worker: "w", limit: 1, now: TestDatabase.t0 + 10, lease: .seconds(60))
        #expect(again.map(\.label) == ["a1"] && again.first?.deviceToken == newToken && again.first?.attempt == job.attempt)
    }

    /// `device show` (`deviceSummary`), the statements both stores share: the device and its environment, its live
    /// jobs, its head's acceptance time (not its dead letters'), its dead letters by reason; nil for no such device.
    @Test(arguments: StoreKind.allCases) func aDeviceSummaryTellsTheHeadTheLiveJobsAndTheDeadLettersByReason(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let support = try #require(db.store as? any SupportQueries)
        let device = try db.device(1)
        #expect(try support.deviceSummary(id: "nobody") == nil)
        let idle = try #require(try support.deviceSummary(id: device))
        #expect(idle.liveJobs == 0 && idle.oldestLiveJobAt == nil && idle.deadLettersByReason.isEmpty && idle.environment == nil)

        try db.enqueue(device, "a", "b")
        try db.enqueue(device, "c", now: TestDatabase.t0 + 5)
        try db.enqueue(device, "d", now: TestDatabase.t0 + 9)
        for reason in ["BadDeviceToken", "PayloadTooLarge"] {
            let head = try #require(try db.claim(at: TestDatabase.t0 + 10).first)
            #expect(try db.store.finish([.dead(head, reason)], worker: "w1", now: TestDatabase.t0 + 1) == [true])
        }
        let c = try #require(try db.claim(at: TestDatabase.t0 + 10).first)
        #expect(try db.store.finish([.dead(c, "BadDeviceToken")], worker: "w1", now: TestDatabase.t0 + 6) == [true])
        let token = try #require(try db.store.device(id: device)).token
        try db.store.setEnvironment(deviceID: device, token: token, environment: .sandbox)

        let summary = try #require(try support.deviceSummary(id: device))
        #expect(summary.device.id == device && summary.environment == "sandbox")
        #expect(summary.liveJobs == 1 && summary.oldestLiveJobAt == TestDatabase.t0 + 9)
        #expect(summary.deadLettersByReason == ["BadDeviceToken": 2, "PayloadTooLarge": 1])
    }
}
