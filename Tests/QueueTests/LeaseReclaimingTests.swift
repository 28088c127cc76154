import Common
import Foundation
import Queue
import TestSupport
import Testing

/// A dead worker's leases taken back at once (SPEC §4), on both stores: only that worker's, only running jobs, and
/// the job goes out again with its next attempt while a late answer from the dead worker changes nothing.
@Suite struct LeaseReclaimingTests {
    let t0 = TestDatabase.t0

    @Test(arguments: StoreKind.allCases) func aDeadWorkersLeasesAreTakenBackAndNoOneElses(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let store = try #require(db.store as? any LeaseReclaiming)
        let a = try db.device(1)
        let b = try db.device(2)
        let c = try db.device(3)
        try db.enqueue(a, "a1")
        try db.enqueue(b, "b1")
        try db.enqueue(c, "c1")
        let dead = try #require(try db.claim("host_a-m.1-100-0000aaaa", limit: 1, lease: .seconds(3600)).first)
        _ = try db.claim("host_a-m.1-200-0000bbbb", limit: 1, lease: .seconds(3600))
        _ = try db.claim("hostXa-m.1-300-0000cccc", limit: 1, lease: .seconds(3600))
        // `_` is no wildcard: the third worker is another host's.
        #expect(Set(try store.leaseHolders(prefix: "host_a-m.1-")) == ["host_a-m.1-100-0000aaaa", "host_a-m.1-200-0000bbbb"])

        #expect(try store.reclaimLeases(of: "host_a-m.1-100-0000aaaa", now: t0 + 1) == 1)
        #expect(try store.leaseHolders(prefix: "host_a-m.1-") == ["host_a-m.1-200-0000bbbb"])
        let again = try #require(try db.claim("host_a-m.1-101-0000dddd", at: t0 + 1).first, "due at once, not after the lease")
        #expect(again.id == dead.id && again.attempt == 2)
        #expect(try db.store.finish([.delivered(dead)], worker: "host_a-m.1-100-0000aaaa", now: t0 + 2) == [false])
        #expect(try store.reclaimLeases(of: "host_a-m.1-100-0000aaaa", now: t0 + 3) == 0, "nothing left to take")
    }
}
