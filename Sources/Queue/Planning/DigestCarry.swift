/// What a digest carries besides its head, and the seal that keeps it whole (SPEC §3 "Alert storms", §2.4),
/// decided once for both stores.
///
/// Why a seal: past DEVICE_QUEUE_MAX, enqueue folds an alert into the device's newest waiting job, and a digest
/// sends the jobs waiting behind its head; `finish` then settles each only if its folded alerts are unchanged. An
/// alert folded into such a job while the digest was in flight left the job behind (nothing lost), but the job then
/// went out again with all its alerts, those the digest had already shown included: the phone saw them twice. So
/// the store's read of the backlog also seals what the digest carries, in the same transaction
/// (`devices.digest_sealed_through`, migration 14), and enqueue never folds into a sealed job (`EnqueuePlan`): an
/// alert arrived before the read and is carried, or after it and waits in a job of its own.
///
/// The store reads the device's seal and its oldest waiting jobs (up to `maximumMerged`), hands them here, writes
/// the new seal if there is one, and returns the jobs carried.
public enum DigestCarry {
    /// A job waiting behind the head, as the store read it (oldest first).
    public struct Waiting: Sendable, Equatable {
        /// Its place in the device's queue, the unit of the seal: it only grows and is never given again (SQLite:
        /// `device_seq`, since a rowid may be reused once the newest rows are deleted; PostgreSQL: the job's id).
        public var position: Int64
        /// A Test-button job: its waiting request needs its own answer, so a digest stops before it.
        public var reportsOutcome: Bool

        public init(position: Int64, reportsOutcome: Bool) {
            self.position = position
            self.reportsOutcome = reportsOutcome
        }
    }

    public struct Decision: Sendable, Equatable {
        /// The first `count` jobs read go with the head.
        public var count: Int
        /// The device's seal becomes this position; nil: it stays as it is.
        public var sealThrough: Int64?
    }

    /// The rule. With fewer than `minimum` jobs waiting the head goes alone (the device is not over DEVICE_BURST).
    /// Otherwise the digest carries the waiting jobs up to the first Test-button job, and seals through the last.
    ///
    /// A seal already covering the oldest waiting job means an earlier attempt of this head (a retry), or an earlier
    /// head, carried it: the digest then carries only sealed jobs and the seal stays. Extending it would seal the job
    /// ingest added past the cap meanwhile, and the next alert would need yet another: the queue would grow by one
    /// per retry of a digest through an APNs outage. Kept, a device holds at most its cap plus that one job.
    public static func decide(_ waiting: [Waiting], sealedThrough: Int64, minimum: Int) -> Decision {
        guard waiting.count >= minimum, let oldest = waiting.first else { return Decision(count: 0, sealThrough: nil) }
        let carriedBefore = oldest.position <= sealedThrough
        let carried = waiting.prefix { !$0.reportsOutcome && (!carriedBefore || $0.position <= sealedThrough) }
        return Decision(count: carried.count, sealThrough: carriedBefore ? nil : carried.last?.position)
    }
}
