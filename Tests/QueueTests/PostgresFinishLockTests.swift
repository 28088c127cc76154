import Common
import Foundation
import Synchronization
import TestSupport
import Testing

@testable import Queue

/// PostgreSQL's `finish` reads which of its jobs the worker still holds, then writes them by id with no lease guard of
/// their own (`PostgresStore+Finish.swift`). What keeps that read true until the commit is its `FOR UPDATE OF j`: the
/// rescue, the claim and the release skip locked rows. Here a finish is held between its read and its writes by a
/// trigger that waits for an advisory lock the test holds, and another deliverer's housekeeping runs meanwhile.
@Suite struct PostgresFinishLockTests {
    @Test func jobsAFinishHasReadAreNotRescuedBeforeItCommits() throws {
        let db = try TestDatabase(.postgres)
        try db.enqueue(try db.device(1), "delivered")
        try db.enqueue(try db.device(2), "retried")
        let claimed = try db.claim(limit: 2, lease: .seconds(1)).sorted { $0.label < $1.label }
        #expect(claimed.map(\.label) == ["delivered", "retried"])

        let gate = try RawPostgres(db.location)
        try gate.execute("SELECT pg_advisory_lock(7)")
        try gate.execute(
            """
            CREATE FUNCTION wait_at_gate() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN PERFORM pg_advisory_lock(7); PERFORM pg_advisory_unlock(7); RETURN OLD; END $$;
            CREATE TRIGGER gate BEFORE DELETE ON jobs FOR EACH ROW EXECUTE FUNCTION wait_at_gate();
            """)

        // The finish's writes go in the plan's order: the delete (which waits at the gate, its own row locked by then)
        // comes before the retry, so only the read's lock holds the retried job meanwhile. Its lock timeout outlasts
        // any wait at the gate on a loaded machine.
        let finishing = try PostgresStore(url: db.location, options: .init(lockTimeout: .seconds(120)), now: TestDatabase.t0)
        let outcomes = [JobOutcome.delivered(claimed[0]), .retry(claimed[1], at: TestDatabase.t0 + 60_000, error: "ServiceUnavailable")]
        let finished = Mutex<Result<[Bool], StoreError>?>(nil)
        let finish = Thread {
            let result = Result { () throws(StoreError) in try finishing.finish(outcomes, worker: "w1", now: TestDatabase.t0) }
            finished.withLock { $0 = result }
        }
        finish.start()
        try waitUntil("the finish to wait at the gate") {
            try gate.query("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted") == [["1"]]
        }

        // Both leases long expired by another deliverer's clock: the finish holds them, so the rescue leaves them.
        let other = try PostgresStore(url: db.location, now: TestDatabase.t0)
        #expect(try other.rescueExpiredLeases(now: TestDatabase.t0 + 3_600_000) == 0)

        try gate.execute("SELECT pg_advisory_unlock(7)")
        try waitUntil("the finish to commit") { finished.withLock { $0 != nil } }
        #expect(try finished.withLock { try $0?.get() } == [true, true])
        #expect(
            try gate.query("SELECT payload, state, last_error, attempted_by IS NULL FROM jobs")
                == [["\\x" + "retried".utf8.map { String(format: "%02x", $0) }.joined(), "retryable", "ServiceUnavailable", "t"]])
    }
}
