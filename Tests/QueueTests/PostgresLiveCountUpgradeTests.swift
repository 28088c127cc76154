import Common
import Foundation
import PostgresDriver
import TestSupport
import Testing

@testable import Queue

/// Migration 11 on PostgreSQL: the live-count triggers go, and the counts the cap reads stay true.
@Suite struct PostgresLiveCountUpgradeTests {
    @Test func upgradingDropsTheTriggersAndRecountsEveryDevice() throws {
        let location = try PostgresServer.shared().createDatabase()
        let old = try PGConnection(conninfo: location, options: .init())
        try PostgresMigrations.apply(on: old, now: TestDatabase.t0, upTo: 9)
        try old.execute(
            """
            INSERT INTO devices (id, device_token, date_added) VALUES ('a', 'token-a', 0), ('b', 'token-b', 0);
            INSERT INTO jobs (public_id, device_id, state, payload, created_at, scheduled_at, expires_at)
            VALUES ('1', 'a', 'available', '', 0, 0, 1), ('2', 'a', 'pending', '', 0, 0, 1), ('3', 'b', 'available', '', 0, 0, 1);
            -- A count that drifted: the migration counts every device again.
            UPDATE devices SET live_jobs = 7 WHERE id = 'b';
            """)
        #expect(try RawPostgres(location).query("SELECT id, live_jobs FROM devices ORDER BY id") == [["a", "2"], ["b", "7"]])

        let store = try PostgresStore(url: location, now: TestDatabase.t0)
        let raw = try RawPostgres(location)
        #expect(try raw.query("SELECT count(*) FROM pg_trigger WHERE tgrelid = 'jobs'::regclass AND NOT tgisinternal") == [["0"]])
        #expect(try raw.query("SELECT id, live_jobs FROM devices ORDER BY id") == [["a", "2"], ["b", "1"]])
        // From here the statements count: a delivered head takes one off.
        let claimed = try store.claim(worker: "w", limit: 10, now: TestDatabase.t0, lease: .seconds(60))
        #expect(try store.finish(claimed.map { .delivered($0) }, worker: "w", now: TestDatabase.t0) == [true, true])
        #expect(try raw.query("SELECT id, live_jobs FROM devices ORDER BY id") == [["a", "1"], ["b", "0"]])
    }
}
