/// Taking back the leases of a worker known to be dead (SPEC §4: "A process restarted on the same host takes back
/// its dead predecessor's leases at once", instead of leaving its in-flight pushes for `LEASE_TIMEOUT`).
///
/// The store cannot know a worker is dead; the caller can, for a worker on its own host (its pid is gone). Both
/// stores implement this; it is apart from `JobQueue` so a test's wrapper store need not, and a caller holding a
/// store that does not simply waits out the lease as before.
public protocol LeaseReclaiming: Sendable {
    /// The distinct workers holding a lease whose id begins with `prefix` (a host's, see the deliverer's worker id).
    func leaseHolders(prefix: String) throws(StoreError) -> [String]
    /// Makes `worker`'s leased jobs due again now, as an expired lease would (`retryable`, `last_error` saying why).
    /// Returns how many. Only for a worker that can no longer finish them: a live one's pushes would go twice.
    func reclaimLeases(of worker: String, now: Int64) throws(StoreError) -> Int
}
