import Common
import Foundation
import PostgresDriver
import Synchronization
import TestSupport
import Testing

@testable import Queue

/// SPEC §4 "No single point of trouble": a host frozen in the middle of a transaction must not hold device rows
/// for long, and whoever waits for them must give up within the lock timeout. Every store session sets
/// `lock_timeout` and `idle_in_transaction_session_timeout` (PG_LOCK_TIMEOUT, PG_IDLE_IN_TRANSACTION_TIMEOUT).
/// `Tests/e2e/test_frozen_host.py` shows the same with real processes frozen by SIGSTOP.
@Suite struct PostgresSessionTimeoutTests {
    /// A batch whose device another session holds locked fails with `lock_not_available` (55P03, 503), not after
    /// the statement timeout (57014), and stores nothing of its other devices; once the lock is gone it goes through.
    @Test func aBatchWaitingForALockedDeviceFailsWithTheLockTimeoutAndStoresNothing() throws {
        let location = try PostgresServer.shared().createDatabase()
        let store = try PostgresStore(url: location, options: .init(lockTimeout: .milliseconds(300)), now: TestDatabase.t0)
        let held = try register(store, 1)
        let free = try register(store, 2)
        let holder = try RawPostgres(location)
        try holder.execute("BEGIN")
        try holder.execute("SELECT 1 FROM devices WHERE id = '\(held)' FOR NO KEY UPDATE")

        let batch = [job(free, "other device"), job(held, "held device")]
        let error = #expect(throws: StoreError.self) { _ = try store.enqueue(batch, now: TestDatabase.t0, ttl: .seconds(3600)) }
        #expect(error?.code == .unavailable)
        #expect(error?.message.contains(PGError.lockNotAvailable) == true, "\(String(describing: error))")
        #expect(try RawPostgres(location).query("SELECT count(*) FROM jobs") == [["0"]])

        try holder.execute("COMMIT")
        #expect(try store.enqueue(batch, now: TestDatabase.t0, ttl: .seconds(3600)) == [.queued, .queued])
    }

    /// The server ends a session idle inside a transaction past the timeout and frees the rows it locked; the
    /// connection is then treated as broken, and the store's next write reconnects.
    @Test func aSessionIdleInATransactionIsEndedAndItsLocksFreed() throws {
        let location = try PostgresServer.shared().createDatabase()
        let store = try PostgresStore(url: location, options: .init(lockTimeout: .seconds(30)), now: TestDatabase.t0)
        let device = try register(store, 1)
        var options = PGConnection.Options()
        options.idleInTransactionTimeout = .seconds(1)
        let frozen = try PGConnection(conninfo: location, options: options)
        let pid = try #require(try frozen.rows("SELECT pg_backend_pid()") { $0.int(0) }.first)
        try frozen.execute("BEGIN")
        try frozen.execute("SELECT 1 FROM devices WHERE id = '\(device)' FOR NO KEY UPDATE")

        // With a 30 s lock timeout, the enqueue goes through only because the server ended the idle session.
        #expect(try store.enqueue([job(device, "after")], now: TestDatabase.t0, ttl: .seconds(3600)) == [.queued])
        try waitUntil("the idle session ended") {
            try RawPostgres(location).query("SELECT count(*) FROM pg_stat_activity WHERE pid = \(pid)") == [["0"]]
        }
        let error = #expect(throws: PGError.self) { try frozen.execute("COMMIT") }
        #expect(error?.isEnvironmental == true)
        #expect(frozen.isBroken)
    }

    /// A transaction whose session the server ended for idling in it (this host was frozen between two round trips)
    /// was rolled back, even when the failure answers the COMMIT: it runs once more on a new connection, so the
    /// webhook it carries is stored rather than refused. Either way libpq meets the server's FATAL: as the COMMIT's
    /// answer, or — read while no statement was running, as when a frozen process wakes to its last answer and the
    /// FATAL in one read (`readFirst`) — as a notice, the COMMIT then finding the socket closed with no SQLSTATE.
    @Test(arguments: [false, true]) func aTransactionEndedForIdlingRunsAgainOnANewConnection(readFirst: Bool) throws {
        let location = try PostgresServer.shared().createDatabase()
        let store = try PostgresStore(
            url: location, options: .init(idleInTransactionTimeout: .seconds(1)), now: TestDatabase.t0)
        let runs = Atomic<Int>(0)
        try store.write { db in
            let run = runs.add(1, ordering: .relaxed).newValue
            let pid = try db.rows("SELECT pg_backend_pid()") { $0.int(0) }.first ?? 0
            try db.run("INSERT INTO delivery_pauses (worker, reason, updated_at) VALUES ('w', 'r', 1)")
            guard run == 1 else { return }
            // Frozen between two round trips: the server ends the session before the COMMIT arrives.
            try waitUntil("the server ended the idle session") {
                try RawPostgres(location).query("SELECT count(*) FROM pg_stat_activity WHERE pid = \(pid)") == [["0"]]
            }
            if readFirst { _ = try? db.drainNotifications() }
        }
        #expect(runs.load(ordering: .relaxed) == 2)
        #expect(try RawPostgres(location).query("SELECT worker FROM delivery_pauses") == [["w"]])
        #expect(store.writerConnectionsOpened == 2)
    }

    /// Migrations are not cut short (SPEC §4): a process starting while another holds the migration lock waits for
    /// it past its own lock and statement timeouts, and says so; the one that migrates says its locks are waited for.
    @Test func aMigrationWaitsForItsLockPastTheSessionTimeoutsAndSaysSo() throws {
        let location = try PostgresServer.shared().createDatabase()
        // An upgrade, not a new database: only an upgrade announces its migrations.
        let older = try #require(PostgresMigrations.all.dropLast().last?.version)
        try PostgresMigrations.apply(on: try PGConnection(conninfo: location, options: .init()), now: TestDatabase.t0, upTo: older)
        let migrating = try RawPostgres(location)
        try migrating.execute("SELECT pg_advisory_lock(hashtext('kumapush-relay schema_migrations'))")
        let lines = LogCapture()
        let logger = Logger(label: "relay", level: .info, sink: LogSink(format: .text) { line in lines.append(line) })
        let options = PostgresStore.Options(statementTimeout: .seconds(1), lockTimeout: .milliseconds(100), logger: logger)
        let opened = Mutex<Result<Int, StoreError>?>(nil)
        let opening = Thread {
            let result = Result { () throws(StoreError) in
                try PostgresStore(url: location, options: options, now: TestDatabase.t0).writerConnectionsOpened
            }
            opened.withLock { $0 = result }
        }
        opening.start()
        try waitUntil("the opening process to say it waits") {
            lines.all.contains { $0.contains("another process is upgrading the database schema") }
        }
        // Waiting longer than its statement timeout, as the server sees it.
        try waitUntil("the wait to outlast the statement timeout") {
            try migrating.query(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND now() - query_start > interval '1.5 s'"
            ) == [["1"]]
        }
        try migrating.execute("SELECT pg_advisory_unlock(hashtext('kumapush-relay schema_migrations'))")
        try waitUntil("the store to open") { opened.withLock { $0 != nil } }
        #expect(try opened.withLock { try $0?.get() } == 1, "the store opened once the migration lock was free")
        #expect(
            lines.all.contains {
                $0.contains("upgrading the database schema; it waits for a table's lock at most 50 ms at a time, then lets writers")
            })
    }

    /// A migration that waits for a table's lock (behind a long transaction) holds up the writers queued behind it for
    /// one attempt's wait at most, so the relay's statements do not fail at their own lock timeout meanwhile (SPEC §4:
    /// upgrades refuse nothing, no migration blocks writers for more than a second). It rolls back, retries until it
    /// has the lock, says so once, and is announced once.
    @Test func aMigrationWaitingForATableLetsWritersThroughAndRetries() throws {
        let location = try PostgresServer.shared().createDatabase()
        // Schema 13: the migration left to apply, 14, alters `devices`.
        let older = try #require(PostgresMigrations.all.dropLast().last?.version)
        try PostgresMigrations.apply(on: try PGConnection(conninfo: location, options: .init()), now: TestDatabase.t0, upTo: older)
        try RawPostgres(location).execute("INSERT INTO devices (id, device_token, date_added) VALUES ('d1', 'token', 0)")
        let holder = try RawPostgres(location)
        try holder.execute("BEGIN; LOCK TABLE devices IN ROW EXCLUSIVE MODE")  // what any writer of devices holds
        let lines = LogCapture()
        let logger = Logger(label: "relay", level: .info, sink: LogSink(format: .text) { line in lines.append(line) })
        let opened = Mutex<Result<Int, StoreError>?>(nil)
        let opening = Thread {
            let result = Result { () throws(StoreError) in
                try PostgresStore(url: location, options: .init(logger: logger), now: TestDatabase.t0).writerConnectionsOpened
            }
            opened.withLock { $0 = result }
        }
        opening.start()
        let monitor = try RawPostgres(location)
        try waitUntil("the migration to queue for the table's lock") {
            try monitor.query(
                "SELECT count(*) FROM pg_locks JOIN pg_class ON pg_class.oid = pg_locks.relation WHERE relname = 'devices' AND NOT granted"
            ) != [["0"]]
        }
        // A writer as the relay's sessions are set (PG_LOCK_TIMEOUT's default): through while the long transaction
        // still holds, where a migration waiting without a limit would keep it queued until its lock timeout failed it.
        try RawPostgres(location).execute("SET lock_timeout = '5s'; UPDATE devices SET last_delivery_error = 'written' WHERE id = 'd1'")
        try waitUntil("the migration to say it retries") { lines.all.contains { $0.contains("a database schema migration waits for a table") } }
        #expect(opened.withLock { $0 == nil }, "not migrated while the table is held")
        try holder.execute("COMMIT")
        try waitUntil("the store to open") { opened.withLock { $0 != nil } }
        #expect(try opened.withLock { try $0?.get() } == 1)
        #expect(try monitor.query("SELECT max(version) FROM schema_migrations") == [[String(PostgresMigrations.latestVersion)]])
        #expect(lines.all.filter { $0.contains("upgrading the database schema;") }.count == 1, "announced once over its attempts")
    }

    private func register(_ store: PostgresStore, _ seed: Int) throws -> String {
        try store.registerDevice(
            token: String(format: "%064x", seed), authTokenHash: "h", now: TestDatabase.t0, newID: { try DeviceID.generate() }
        ).device.id
    }

    private func job(_ device: String, _ label: String) -> NewJob {
        NewJob(deviceID: device, publicID: UUID().uuidString.lowercased(), payload: Array(label.utf8))
    }
}
