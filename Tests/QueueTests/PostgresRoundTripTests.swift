import Common
import Foundation
import PostgresDriver
import TestSupport
import Testing

@testable import Queue

/// A trickle's webhook and push are a few transactions each, and every round trip to PostgreSQL is a wake-up of the
/// server and of the relay (and a network round trip when the database is on another host). Statements whose
/// answer is not read travel with the next one that is (`PGConnection.runDeferred`).
@Suite struct PostgresRoundTripTests {
    let t0 = TestDatabase.t0

    @Test func aWebhookIsTwoRoundTripsAndItsPushTwoMore() throws {
        let db = try TestDatabase(.postgres)
        let store = try #require(db.store as? PostgresStore)
        let device = try db.device(1)
        try db.enqueue(device, "warm-up")  // prepares the statements, which costs round trips once per connection
        _ = try db.store.finish(try db.claim().map { .delivered($0) }, worker: "w1", now: t0)

        var before = store.writerRoundTrips
        try db.enqueue(device, "down")
        #expect(store.writerRoundTrips - before == 2, "BEGIN, lock and read; then the write and COMMIT")

        let claimed = try db.claim()
        #expect(claimed.map(\.label) == ["down"])
        before = store.writerRoundTrips
        #expect(try db.store.finish(claimed.map { .delivered($0) }, worker: "w1", now: t0) == [true])
        #expect(store.writerRoundTrips - before == 2, "BEGIN, lock and delete; then the device, promotion, NOTIFY and COMMIT")
        #expect(try db.liveLabels(device).isEmpty)
    }

    /// A digest's backlog read seals what it carries (`DigestCarry`): the device lock and the read in one round trip,
    /// the seal with the COMMIT in a second.
    @Test func aDigestsSealedBacklogReadIsTwoRoundTrips() throws {
        let db = try TestDatabase(.postgres)
        let store = try #require(db.store as? PostgresStore)
        let device = try db.device(1)
        for round in 0..<2 {  // the first round prepares the statements, which costs round trips once per connection
            try db.enqueue(device, "head \(round)", "waiting \(round)")
            let head = try #require(try db.claim().first)
            let before = store.writerRoundTrips
            let carried = try db.store.carryBacklog(deviceID: device, limit: 10, minimum: 0, deviceCap: .max)
            #expect(carried.count == 1)
            if round == 1 { #expect(store.writerRoundTrips - before == 2, "BEGIN, lock and read; then the seal and COMMIT") }
            _ = try db.store.finish([JobOutcome(head, kind: .delivered, merged: carried.map(\.asMerged))], worker: "w1", now: t0)
        }
    }

    /// Every verdict's writes travel with the COMMIT (`FinishPlan`): a batch of outcomes is the locked read and the
    /// commit, whatever it holds (retries, dead letters, give-backs and removed devices each took round trips of
    /// their own before).
    @Test func aBatchOfEveryVerdictIsTwoRoundTrips() throws {
        let db = try TestDatabase(.postgres)
        let store = try #require(db.store as? PostgresStore)
        let kinds: [JobOutcome.Kind] = [
            .delivered, .retry(at: t0 + 5_000, error: "Busy"), .deadLetter(reason: "BadTopic"), .postpone(until: t0 + 5_000),
            .removeDevice(reason: "Unregistered")
        ]
        var before = 0
        var heads: [ClaimedJob] = []
        // The first round prepares the statements, which costs round trips once per connection.
        for round in 0..<2 {
            for seed in 1...5 { try db.enqueue(try db.device(round * 10 + seed), "only") }
            heads = try db.claim()
            #expect(heads.count == 5)
            before = store.writerRoundTrips
            let outcomes = zip(heads, kinds).map { JobOutcome($0, kind: $1) }
            #expect(try db.store.finish(outcomes, worker: "w1", now: t0) == [true, true, true, true, true])
        }
        #expect(store.writerRoundTrips - before == 2, "BEGIN, locks and the held jobs; then every write and COMMIT")
        #expect(try db.store.device(id: heads[4].deviceID) == nil, "the removed device is gone")
    }

    /// The store reads `bytea` in the hex form; a database whose default is the escape form must not turn every
    /// payload into garbage (and every job into an `InvalidPayload` dead letter).
    @Test func payloadsReadBackWhateverByteaOutputTheDatabaseDefaultsTo() throws {
        let directory = TemporaryDirectory()
        let location = try StoreKind.postgres.freshLocation(in: directory)
        let name = try #require(try StoreKind.postgres.rawQuery(location, "SELECT current_database()").first?.first)
        try StoreKind.postgres.rawQuery(location, "ALTER DATABASE \"\(name)\" SET bytea_output = 'escape'")
        let store = try StoreKind.postgres.open(location, now: t0)
        let device = try store.registerDevice(token: String(repeating: "ab", count: 32), authTokenHash: "h", now: t0) {
            try DeviceID.generate()
        }.device.id
        let payload = Array("{\"msg\":\"🔴 \\\\ down\"}".utf8) + [0, 255, 10]
        _ = try store.enqueue([NewJob(deviceID: device, publicID: "p1", payload: payload)], now: t0, ttl: .seconds(60))
        #expect(try store.claim(worker: "w", limit: 1, now: t0, lease: .seconds(60)).map(\.payload) == [payload])
    }

    /// A deliverer opens its LISTEN connection from its loop after start-up, maybe while the server fails over: the
    /// first failed attempt must start the backoff, so that the next polls fail at once instead of each trying to
    /// connect again (every few milliseconds, on the LISTEN thread).
    @Test func aListenerThatCannotConnectBacksOffFromItsFirstAttempt() {
        let options = PGConnection.Options(statementTimeout: .seconds(5), connectTimeoutSeconds: 2)
        let listener = PostgresListener(conninfo: "host=127.0.0.1 port=1 dbname=none", options: options)
        #expect(!listener.isBackingOff, "nothing tried yet")
        #expect(throws: PGError.self) { _ = try listener.poll() }
        #expect(listener.isBackingOff, "the next poll waits out the backoff")
    }

    @Test func aDeferredStatementThatFailsFailsItsTransactionAndNothingOfItIsCommitted() throws {
        let connection = try Self.connectionToATable()

        connection.beginDeferred()
        connection.runDeferred("INSERT INTO t VALUES (1)")
        connection.runDeferred("INSERT INTO t VALUES (1)")
        connection.runDeferred("INSERT INTO t VALUES (2)")
        let error = #expect(throws: PGError.self) { try connection.rows("SELECT count(*) FROM t") { $0.int(0) } }
        #expect(error?.isUniqueViolation == true)
        #expect(error?.sql == "INSERT INTO t VALUES (1)", "the error names the statement that failed")
        connection.rollback()

        // The connection left pipeline mode and works; the transaction's first insert was undone.
        #expect(!connection.isBroken)
        #expect(try connection.rows("SELECT count(*) FROM t") { $0.int(0) } == [0])
        connection.beginDeferred()
        connection.runDeferred("INSERT INTO t VALUES (3)")
        try connection.commit()
        #expect(try connection.rows("SELECT id FROM t") { $0.int(0) } == [3])
    }

    @Test func aStatementThatFailsBesideItsCommitLeavesTheConnectionOutOfTheTransaction() throws {
        let connection = try Self.connectionToATable()

        // The failing insert travels with the COMMIT, which the server then skips: the transaction is still open,
        // aborted, until the rollback ends it.
        connection.beginDeferred()
        connection.runDeferred("INSERT INTO t VALUES (1)")
        #expect(try connection.rows("SELECT count(*) FROM t") { $0.int(0) } == [1])  // BEGIN is on the server now
        connection.runDeferred("INSERT INTO t VALUES (1)")
        #expect(throws: PGError.self) { try connection.commit() }
        connection.rollback()

        connection.beginDeferred()
        connection.runDeferred("INSERT INTO t VALUES (2)")
        try connection.commit()
        #expect(try connection.rows("SELECT id FROM t") { $0.int(0) } == [2])
    }

    /// A connection to a fresh database holding one empty table, `t (id INTEGER PRIMARY KEY)`.
    private static func connectionToATable() throws -> PGConnection {
        let connection = try PGConnection(conninfo: try PostgresServer.shared().createDatabase(), options: .init())
        try connection.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
        return connection
    }
}
