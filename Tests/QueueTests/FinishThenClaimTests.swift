import Common
import Foundation
import Queue
import TestSupport
import Testing

/// `finishThenClaim`: a delivery loop's turn, its answers recorded and the heads they let through claimed in one
/// store call (one transaction on SQLite, two on PostgreSQL).
@Suite struct FinishThenClaimTests {
    let t0 = TestDatabase.t0

    @Test(arguments: StoreKind.allCases) func theAnswersAreRecordedAndTheHeadsTheyLetThroughAreClaimed(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let a = try db.device(1)
        let b = try db.device(2)
        try db.enqueue(a, "a1", "a2")
        try db.enqueue(b, "b1", "b2")
        let heads = try db.claim()
        #expect(heads.map(\.label) == ["a1", "b1"])

        let turn = try db.store.finishThenClaim(
            [.delivered(heads[0]), .retry(heads[1], at: t0 + 1000)], worker: "w1", now: t0, claimLimit: 10, lease: .seconds(60))
        #expect(turn.applied == [true, true])
        let claimed = try turn.claimed.get()
        #expect(claimed.map(\.label) == ["a2"], "a1's successor is due at once; b1 retries later and still blocks b2")
        #expect(claimed.first?.attempt == 1 && claimed.first?.deviceToken == String(format: "%064x", 1))
        #expect(try db.liveLabels(a) == ["a2"])
    }

    @Test(arguments: StoreKind.allCases) func aFailedClaimLeavesTheAnswersRecorded(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let a = try db.device(1)
        try db.enqueue(a, "a1", "a2")
        let head = try #require(try db.claim().first)
        try refuseClaims(db)

        let turn = try db.store.finishThenClaim([.delivered(head)], worker: "w1", now: t0, claimLimit: 10, lease: .seconds(60))
        #expect(turn.applied == [true])
        #expect(throws: StoreError.self) { try turn.claimed.get() }
        #expect(try db.liveLabels(a) == ["a2"], "a1 was delivered: recorded though the claim after it failed")
    }

    @Test(arguments: StoreKind.allCases) func aFailedFinishThrowsAndClaimsNothing(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let a = try db.device(1)
        let c = try db.device(3)
        try db.enqueue(a, "a1", "a2")
        let head = try #require(try db.claim().first)
        try db.enqueue(c, "c1")
        switch db.kind {
        case .sqlite: try refuseRows(db, "promotions", where: "state = 'available' AND device_seq = 1")  // a2 made head
        case .postgres: try refuse(db, "deletes", "BEFORE DELETE ON jobs", when: nil)
        }

        #expect(throws: StoreError.self) {
            try db.store.finishThenClaim([.delivered(head)], worker: "w1", now: t0, claimLimit: 10, lease: .seconds(60))
        }
        #expect(try db.liveLabels(a) == ["a1", "a2"], "nothing recorded")
        #expect(try db.kind.rawQuery(db.location, "SELECT state FROM jobs WHERE device_id = '\(c)'") == [["available"]], "nothing claimed")
    }

    /// The point of one transaction: the heads a finish promotes are the rows its claim leases, so their pages reach
    /// the WAL once, not once per transaction. Measured against the same turn made as two transactions (the protocol's
    /// own version, reached through a `ForwardingStore`) on a twin database.
    @Test func onSQLiteATurnWritesTheWALOnceForWhatBothHalvesChange() throws {
        func walGrowth(ofATurnThrough forwarding: Bool) throws -> Int {
            let directory = TemporaryDirectory()
            let path = directory.path("relay.db")
            // No truncation thread: the WAL only grows while the test measures it.
            let sqlite = try SQLiteStore(path: path, options: .init(walTruncateInterval: nil), now: t0)
            let store: any RelayStore = forwarding ? ForwardingStore(inner: sqlite) : sqlite
            for seed in 1...50 {
                let device = try store.registerDevice(
                    token: String(format: "%064x", seed), authTokenHash: "h", now: t0, newID: { try DeviceID.generate() }
                ).device.id
                _ = try store.enqueue(
                    ["first", "second"].map { NewJob(deviceID: device, publicID: UUID().uuidString, payload: Array($0.utf8)) }, now: t0,
                    ttl: .seconds(3600))
            }
            let heads = try store.claim(worker: "w1", limit: 100, now: t0, lease: .seconds(60))
            #expect(heads.count == 50)
            let before = try walSize(path)
            let turn = try store.finishThenClaim(heads.map { .delivered($0) }, worker: "w1", now: t0, claimLimit: 100, lease: .seconds(60))
            #expect(try turn.claimed.get().map(\.label) == Array(repeating: "second", count: 50))
            return try walSize(path) - before
        }
        let oneTransaction = try walGrowth(ofATurnThrough: false)
        let twoTransactions = try walGrowth(ofATurnThrough: true)
        #expect(oneTransaction > 0 && oneTransaction < twoTransactions, "WAL bytes: \(oneTransaction) in one transaction, \(twoTransactions) in two")
    }

    private func walSize(_ path: String) throws -> Int {
        (try FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? Int) ?? 0
    }

    /// Makes the statements that lease a job fail, on the store's own database: on SQLite those leasing a device's second
    /// job (a2 in these tests), on PostgreSQL any.
    private func refuseClaims(_ db: TestDatabase) throws {
        switch db.kind {
        case .sqlite: try refuseRows(db, "claims", where: "state = 'running' AND device_seq = 1")
        case .postgres: try refuse(db, "claims", "BEFORE UPDATE OF state ON jobs", when: "NEW.state = 'running'")
        }
    }

    /// SQLite: a partial index whose key cannot be computed (`json` of text that is not JSON), so a statement that would
    /// leave a job matching `condition` fails where it writes the row, inside the store's transaction. Not a trigger:
    /// the store's writer fires none (`SQLiteStore.init`). No job may match yet, or creating the index fails.
    private func refuseRows(_ db: TestDatabase, _ what: String, where condition: String) throws {
        try db.kind.rawQuery(db.location, "CREATE INDEX refuse_\(what) ON jobs (json('\(what) refused')) WHERE \(condition)")
    }

    /// PostgreSQL: a trigger named `refuse_<what>` that aborts the statements `event` names (where `when` holds).
    private func refuse(_ db: TestDatabase, _ what: String, _ event: String, when condition: String?) throws {
        try db.kind.rawQuery(
            db.location, "CREATE FUNCTION refuse_\(what)() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION '\(what) refused'; END $$")
        try db.kind.rawQuery(
            db.location,
            "CREATE TRIGGER refuse_\(what) \(event) FOR EACH ROW \(condition.map { "WHEN (\($0))" } ?? "") EXECUTE FUNCTION refuse_\(what)()")
    }
}
