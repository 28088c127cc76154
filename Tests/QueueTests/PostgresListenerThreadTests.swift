import Common
import Foundation
import PostgresDriver
import TestSupport
import Testing

@testable import Queue

/// The thread that owns a deliverer's LISTEN connection (`PostgresListenerThread`): it reports a server it cannot
/// reach, ends when asked even while it waits out a backoff, and its count never goes back, so a deliverer comparing
/// counts never misses a change across a restart of the thread. (`PostgresWakeUpTests` has it wake an engine.)
@Suite struct PostgresListenerThreadTests {
    /// Waits (with a deadline) until `condition` holds.
    func eventually(_ condition: () -> Bool) -> Bool {
        let deadline = ContinuousClock.now + .seconds(60)
        while !condition() && ContinuousClock.now < deadline { Thread.sleep(forTimeInterval: 0.005) }
        return condition()
    }

    @Test func aThreadThatCannotConnectReportsItAndStopsWhenAsked() throws {
        let options = PGConnection.Options(statementTimeout: .seconds(5), connectTimeoutSeconds: 2)
        let thread = try PostgresListenerThread(
            conninfo: "host=127.0.0.1 port=1 dbname=none", options: options, failover: FailoverSignal(), startingAt: 7)
        #expect(eventually { (try? thread.changes()) == nil }, "the failure is reported")
        #expect(thread.isRunning, "and the thread waits to try again")
        // On another thread, so that a stop that never returns fails this test instead of hanging the run.
        let stopped = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            thread.stop()
            stopped.signal()
        }
        #expect(stopped.wait(timeout: .now() + 60) == .success, "stop() returned")
        #expect(!thread.isRunning)
        #expect(thread.lastChanges == 7)
    }

    @Test func theCountGoesOnFromWhereAStoppedThreadLeftIt() throws {
        let db = try TestDatabase(.postgres)
        let store = try #require(db.store as? PostgresStore)
        #expect(eventually { ((try? store.changeCounter()) ?? 0) > 0 }, "connected: the count moved once by itself")
        let before = try store.changeCounter()
        store.stopWakingOnChanges()
        #expect(!store.isListening)
        #expect(eventually { (try? store.changeCounter()) != before }, "a new thread connected")
        #expect(try store.changeCounter() > before)
        #expect(store.isListening)
    }

    /// Another connection of the store found its server read-only (a failover fenced the old primary): with no NOTIFY
    /// to wake it, the thread still looks at the signal, and LISTENs again on a new connection.
    @Test func aFailoverSignalMovesTheListenConnectionWithoutANotify() throws {
        let url = try PostgresServer.shared().createDatabase()
        _ = try PostgresStore(url: url, now: TestDatabase.t0)  // migrated
        let admin = try RawPostgres(url)
        let failover = FailoverSignal()
        let options = PGConnection.Options(statementTimeout: .seconds(5), connectTimeoutSeconds: 2)
        let thread = try PostgresListenerThread(conninfo: url, options: options, failover: failover, startingAt: 0)
        defer { thread.stop() }
        #expect(eventually { (try? Self.listenBackends(admin).count) == 1 && (try? thread.changes()) == 1 }, "listening")
        let first = try Self.listenBackends(admin)
        failover.raise()
        #expect(eventually { (try? Self.listenBackends(admin)).map { $0.count == 1 && $0 != first } ?? false }, "moved")
        #expect(eventually { (try? thread.changes()) == 2 }, "and the count moved once, for what it may have missed")
    }

    static func listenBackends(_ admin: RawPostgres) throws -> [String] {
        try admin.query(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query = 'LISTEN kumapush_jobs'"
        ).map { $0[0] }
    }
}
