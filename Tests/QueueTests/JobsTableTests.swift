import Common
import Foundation
import TestSupport
import Testing

@testable import Queue

/// The SQLite `jobs` table as schema 10 left it: rebuilt from an older database with every job kept, and written
/// without the temporary B-tree SQLite builds for a constant `IN` list of three or more values (or an
/// `INSERT … SELECT` into a table with triggers) each time a statement runs — 2–6 µs a statement, several per push.
@Suite struct JobsTableTests {
    /// The statements every enqueued and every delivered job runs, and bare writes of a job row (whatever the
    /// statement, the table's CHECKs and partial indexes are evaluated with it).
    @Test func writingAJobBuildsNoTemporaryBTree() throws {
        let db = try TestDatabase()
        let raw = try RawSQLite(path: db.path)
        let statements = [
            SQLiteStore.readDevice, SQLiteStore.insertJob, SQLiteStore.promoteNumbered,
            SQLiteStore.deleteJob, SQLiteStore.retryJob, SQLiteStore.discardJob, SQLiteStore.giveBack
        ]
        for sql in statements {
            let opcodes = try raw.query("EXPLAIN \(sql)").map { $0[1] }
            #expect(opcodes.contains("Halt"), "EXPLAIN listed the program")
            let temporaryBTrees = opcodes.filter { $0 == "OpenEphemeral" }.count
            #expect(temporaryBTrees == 0, "\(sql)")
        }
    }

    /// Upgrading rebuilds `jobs` (a CHECK cannot be altered): every job keeps its id, state and content, the
    /// indexes and the live-count insert trigger come back, and the queue goes on where it was.
    @Test func aQueueFromSchemaNineIsRebuiltWithEveryJobKept() throws {
        let directory = TemporaryDirectory()
        let path = directory.path("relay.db")
        let raw = try sqliteDatabase(atSchema: 9, path: path)
        // Schema 9's triggers count the live jobs as they are inserted: three (the dead letter does not count).
        try raw.execute(
            """
            INSERT INTO devices (id, device_token, date_added) VALUES ('dev-a', '\(String(repeating: "a", count: 64))', 0);
            INSERT INTO jobs (id, public_id, device_id, state, payload, created_at, scheduled_at, expires_at, attempt,
                              attempted_by, lease_expires_at, finalized_at, last_error, reports_outcome, folded, folded_count, badge)
            VALUES (7, 'p7', 'dev-a', 'discarded', 'dead', 1, 1, 9999999999999, 3, NULL, NULL, 5, 'BadDeviceToken', 0, NULL, 0, NULL),
                   (8, 'p8', 'dev-a', 'running', 'head', 2, 2, 9999999999999, 1, 'w1', 9999999999999, NULL, '', 1, NULL, 0, 2),
                   (9, 'p9', 'dev-a', 'pending', 'next', 3, 3, 9999999999999, 0, NULL, NULL, NULL, '', 0, x'7b7d', 4, 1),
                   (10, 'p10', 'dev-a', 'pending', 'last', 4, 4, 9999999999999, 0, NULL, NULL, NULL, '', 0, NULL, 0, NULL);
            """)
        let columns = "id, public_id, state, payload, attempt, attempted_by, finalized_at, last_error, reports_outcome, folded, folded_count, badge"
        let before = try raw.query("SELECT \(columns) FROM jobs ORDER BY id")
        #expect(try raw.query("SELECT live_jobs FROM devices") == [["3"]])

        let store = try SQLiteStore(path: path, now: TestDatabase.t0)
        #expect(try raw.query("SELECT max(version) FROM schema_migrations") == [[String(SQLiteStore.schemaVersion)]])
        #expect(try raw.query("SELECT \(columns) FROM jobs ORDER BY id") == before)
        let indexes = Set(try raw.query("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'jobs'").map { $0[0] })
        #expect(
            indexes == [
                "jobs_one_head_per_device", "jobs_by_device_seq", "jobs_dead_by_device", "jobs_due", "jobs_leased", "jobs_dead",
                "jobs_waiting_tests"
            ])
        // Schema 12 numbers each device's jobs in acceptance order, dead letters included, and the device row holds
        // the next number; the foreign key is gone (its cascade needed an index ordered by device).
        #expect(try raw.query("SELECT id, device_seq FROM jobs ORDER BY id") == [["7", "0"], ["8", "1"], ["9", "2"], ["10", "3"]])
        #expect(try raw.query("SELECT next_seq FROM devices") == [["4"]])
        #expect(try raw.query("PRAGMA foreign_key_list(jobs)").isEmpty)
        // An older binary still running after the upgrade cannot enqueue: its insert does not number the job
        // (docs/operations.md, "Upgrade").
        #expect(throws: (any Error).self) {
            try raw.execute(
                """
                INSERT INTO jobs (public_id, device_id, state, payload, created_at, scheduled_at, expires_at)
                VALUES ('old', 'dev-a', 'pending', 'x', 5, 5, 9999999999999)
                """)
        }
        let triggers = Set(try raw.query("SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'jobs'").map { $0[0] })
        #expect(triggers == ["jobs_live_on_insert"])  // the others gave way to explicit counting (migration 11)

        // The head is still one: a second head for the device is refused by the rebuilt unique index.
        #expect(throws: (any Error).self) { try raw.execute("UPDATE jobs SET state = 'available' WHERE id = 10") }
        // The head's lease (w1's) runs out; another deliverer claims it and delivers it: the next job is promoted,
        // the live count drops by one, and a new alert queues behind.
        let later: Int64 = 9_999_999_999_999
        #expect(try store.rescueExpiredLeases(now: later) == 1)
        let head = try #require(try store.claim(worker: "w2", limit: 10, now: later, lease: .seconds(60)).first)
        #expect(head.id == 8 && head.attempt == 2 && head.publicID == "p8" && head.reportsOutcome)
        #expect(try store.finish([.delivered(head)], worker: "w2", now: later) == [true])
        #expect(try raw.query("SELECT state FROM jobs WHERE id IN (9, 10) ORDER BY id") == [["available"], ["pending"]])
        #expect(try raw.query("SELECT live_jobs FROM devices") == [["2"]])
        #expect(try store.reportedOutcome(publicID: "p8")?.kind == .delivered)
        _ = try store.enqueue([NewJob(deviceID: "dev-a", publicID: "p11", payload: Array("new".utf8))], now: TestDatabase.t0, ttl: .seconds(60))
        #expect(try raw.query("SELECT state, device_seq FROM jobs WHERE id > 10") == [["pending", "4"]])
    }
}
