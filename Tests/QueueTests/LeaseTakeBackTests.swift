import Queue
import Testing

/// SPEC §4: a crashed deliverer's successor on the same machine takes its leases back at once, on both stores; the
/// leases of other workers stay theirs, and the gone worker's late answers change nothing.
@Suite struct LeaseTakeBackTests {
    let t0 = TestDatabase.t0

    @Test(arguments: StoreKind.allCases) func theLeasesOfAGoneWorkerAreDueAtOnceAndOnlyTheirs(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let a = try db.device(1)
        let b = try db.device(2)
        try db.enqueue(a, "a1")
        try db.enqueue(b, "b1")
        let crashed = try #require(try db.claim("gone", limit: 1, lease: .seconds(600)).first)
        let other = try #require(try db.claim("alive", limit: 1, lease: .seconds(600)).first)
        #expect(Set(try db.store.leaseHolders()) == ["gone", "alive"])

        #expect(try db.store.takeBackLeases(of: "gone", now: t0 + 1) == 1)
        #expect(try db.store.leaseHolders() == ["alive"])
        let again = try #require(try db.claim("successor", at: t0 + 1).first, "due now, not in ten minutes")
        #expect(again.id == crashed.id && again.attempt == 2)
        #expect(try db.store.finish([.delivered(crashed)], worker: "gone", now: t0 + 2) == [false], "fenced")
        #expect(try db.store.finish([.delivered(other)], worker: "alive", now: t0 + 2) == [true], "untouched")
    }
}
