import Common
import Queue
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

    /// A trigger that aborts any statement leasing a job, on the store's own database.
    private func refuseClaims(_ db: TestDatabase) throws {
        switch db.kind {
        case .sqlite:
            try db.kind.rawQuery(
                db.location,
                """
                CREATE TRIGGER refuse_claims BEFORE UPDATE OF state ON jobs WHEN NEW.state = 'running'
                BEGIN SELECT RAISE(ABORT, 'claims refused'); END
                """)
        case .postgres:
            try db.kind.rawQuery(
                db.location,
                "CREATE FUNCTION refuse_claims() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'claims refused'; END $$")
            try db.kind.rawQuery(
                db.location,
                """
                CREATE TRIGGER refuse_claims BEFORE UPDATE OF state ON jobs FOR EACH ROW WHEN (NEW.state = 'running')
                EXECUTE FUNCTION refuse_claims()
                """)
        }
    }
}
