import Common
import Queue

/// A crash costs no wait (SPEC §4): before delivering, take back the leases of this host's dead predecessors.
extension DeliveryRuntime {
    /// Makes the jobs leased by dead workers of this process space due again. A failure only means they wait out
    /// their leases, as before: it is logged, never fatal.
    static func reclaimDeadPredecessorsLeases(
        identity: WorkerIdentity, store: any RelayStore, clock: any WallClock, logger: Logger
    ) {
        guard let prefix = identity.prefix, let reclaiming = store as? any LeaseReclaiming else { return }
        do {
            for worker in try reclaiming.leaseHolders(prefix: prefix) where identity.isDeadPredecessor(worker) {
                let jobs = try reclaiming.reclaimLeases(of: worker, now: clock.nowMillis())
                logger.info(
                    "took back the leases of a deliverer on this host that is gone",
                    ["worker": worker, "jobs": String(jobs)])
            }
        } catch {
            logger.warning(
                "cannot take back the leases of this host's dead deliverers; they expire after LEASE_TIMEOUT",
                ["error": error.description])
        }
    }
}
