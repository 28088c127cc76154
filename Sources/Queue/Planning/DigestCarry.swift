/// What a digest carries besides its head, and the seal that keeps it whole (SPEC §3 "Alert storms", §2.4), decided
/// once for both stores.
///
/// Why a seal: past DEVICE_QUEUE_MAX, enqueue folds an alert into the device's newest waiting job, and a digest
/// sends the jobs waiting behind its head; `finish` then settles each only if its folded alerts are unchanged. An
/// alert folded into such a job while the digest was in flight left the job behind (nothing lost), but the job then
/// went out again with all its alerts, those the digest had already shown included: the phone saw them twice. So
/// the store's read of the backlog also seals what the digest carries, in the same transaction
/// (`devices.digest_sealed_through`, migration 14), and enqueue never folds into a sealed job (`EnqueuePlan`).
///
/// Why the fold target is left out: enqueue at the cap folds into the device's newest waiting job that does not
/// report an outcome, and with that job sealed it could only store the alert as a job past the cap. So a digest of
/// a device near its cap neither carries nor seals that job: ingest keeps folding into it while the digest is in
/// flight, and no device holds more than DEVICE_QUEUE_MAX live jobs (SPEC §4). Further below the cap, ingest stores
/// new rows (newer than anything sealed) until it reaches the cap, so it again finds an unsealed job to fold into.
/// This holds when the deliverer reads the same DEVICE_QUEUE_MAX as ingest; a deliverer on another value leaves
/// `EnqueuePlan`'s sealed-tail fallback (a row past the cap) as the safety net.
///
/// The store reads, in one transaction, the device's seal, its live jobs and its fold target, and its oldest
/// waiting jobs (up to `maximumMerged`); it hands them here, writes the new seal if there is one, and returns the
/// jobs carried.
enum DigestCarry {
    /// A job waiting behind the head, as the store read it (oldest first).
    struct Waiting: Sendable, Equatable {
        /// Its place in the device's queue, the unit of the seal: it only grows and is never given again (SQLite:
        /// `device_seq`, since a rowid may be reused once the newest rows are deleted; PostgreSQL: the job's id).
        var position: Int64
        /// A Test-button job: its waiting request needs its own answer, so a digest stops before it.
        var reportsOutcome: Bool
    }

    /// The device, as the store read it in the transaction that seals.
    struct Device: Sendable, Equatable {
        /// `devices.digest_sealed_through`.
        var sealedThrough: Int64
        /// Its live jobs (`devices.live_jobs`): the head and every job waiting behind it.
        var live: Int
        /// The position of its newest waiting job that does not report an outcome: the one enqueue folds into past
        /// the cap (`EnqueuePlan.StoredTail`); nil when there is none.
        var foldTarget: Int64?
    }

    struct Decision: Sendable, Equatable {
        /// The first `count` jobs read go with the head.
        var count: Int
        /// The device's seal becomes this position; nil: it stays as it is.
        var sealThrough: Int64?
    }

    /// Whether a digest of `device` leaves its fold target out, given the cap ingest applies (DEVICE_QUEUE_MAX). At
    /// the cap ingest folds into it. One below, too: a Test request may still take the last place (a job that is
    /// no fold target), and the next alert then folds. Two or more below, ingest needs at least two more jobs to
    /// reach the cap, at most one of them a Test (one waits per device): an alert's row, newer than the seal.
    static func leavesFoldTargetOut(_ device: Device, cap: Int) -> Bool { device.live >= cap - 1 }

    /// The rule. With fewer than `minimum` jobs waiting the head goes alone (the device is not over DEVICE_BURST).
    /// Otherwise the digest carries the waiting jobs up to the first Test-button job, and up to the device's fold
    /// target when it is near `cap` (`leavesFoldTargetOut`), and seals through the last it carries.
    ///
    /// A seal already covering the oldest waiting job means an earlier attempt of this head (a retry), or an earlier
    /// head, carried it: the digest then carries only sealed jobs and the seal stays. Extending it would seal a job
    /// that a deliverer on a larger DEVICE_QUEUE_MAX than ingest's let ingest add past the cap meanwhile, and each
    /// retry of a digest through an APNs outage would add another.
    static func decide(_ waiting: [Waiting], device: Device, cap: Int, minimum: Int) -> Decision {
        guard waiting.count >= minimum, let oldest = waiting.first else { return Decision(count: 0, sealThrough: nil) }
        let sealed = device.sealedThrough
        let carriedBefore = oldest.position <= sealed
        let foldTarget = leavesFoldTargetOut(device, cap: cap) ? device.foldTarget ?? .max : .max
        let carried = waiting.prefix { !$0.reportsOutcome && $0.position < foldTarget && (!carriedBefore || $0.position <= sealed) }
        return Decision(count: carried.count, sealThrough: carriedBefore ? nil : carried.last?.position)
    }
}
