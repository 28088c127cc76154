import Common

/// The states of a push job, with River's names plus `pending`.
///
/// Per device exactly one live job is the *head* (`available`, `running` or `retryable`); the device's later jobs
/// wait as `pending` and the oldest is promoted when the head completes or is dead-lettered. A unique partial index
/// enforces "one head per device", which is what keeps a device's pushes in acceptance order across any number of
/// workers and processes.
public enum JobState: String, Sendable, CaseIterable {
    /// Waiting behind an earlier job of the same device.
    case pending
    /// The device's head job, due at `scheduled_at`.
    case available
    /// Leased by a worker until `lease_expires_at`.
    case running
    /// The head job, waiting to be retried at `scheduled_at`.
    case retryable
    /// Dead-lettered with a reason; kept for `replay` until `DEAD_LETTER_RETENTION` passes.
    case discarded
}

/// A job to enqueue.
public struct NewJob: Sendable, Equatable {
    public var deviceID: String
    /// Public id (a UUID): answered in the 202, and sent as `apns-id` on every attempt.
    public var publicID: String
    /// What the deliverer needs to build the push at send time (opaque to the queue).
    public var payload: [UInt8]
    /// Record the final outcome for a waiting request (the Test button) in `job_outcomes`.
    public var reportsOutcome: Bool
    /// A monitor's new state, recorded for the device's badge in the same transaction as the job.
    public var monitor: MonitorReport?

    public init(deviceID: String, publicID: String, payload: [UInt8], reportsOutcome: Bool = false, monitor: MonitorReport? = nil) {
        self.deviceID = deviceID
        self.publicID = publicID
        self.payload = payload
        self.reportsOutcome = reportsOutcome
        self.monitor = monitor
    }
}

/// What the badge needs of an alert (SPEC §3 `aps.badge`): which monitor, and whether it is now down. Only this is
/// kept per device — a monitor id, or a hash of the name of a monitor without one; never names or messages.
public struct MonitorReport: Sendable, Equatable {
    public var key: String
    public var isDown: Bool

    public init(key: String, isDown: Bool) {
        self.key = key
        self.isDown = isDown
    }

    /// Down (status 0) and up (1) change the count; pending, maintenance and anything else leave it as it is.
    public init?(_ event: AlertEvent) {
        guard event.kind == .monitor, let status = event.status, status == .down || status == .up else { return nil }
        if let id = event.monitorID {
            key = "id:\(id)"
        } else if !event.monitorName.isEmpty {
            key = "name:" + String(Crypto.sha256Hex(event.monitorName).prefix(32))
        } else {
            return nil
        }
        isDown = status == .down
    }
}

/// The final outcome of a job that reports one (see `NewJob.reportsOutcome`).
public struct ReportedOutcome: Sendable, Hashable {
    public enum Kind: String, Sendable {
        /// APNs accepted it.
        case delivered
        /// APNs rejected it permanently; `reason` is its reason.
        case rejected
        /// APNs said the token is gone; the device was removed.
        case unregistered
        /// The relay gave up on it without an APNs rejection (`reason`: Expired, InvalidPayload).
        case failed
    }

    public var kind: Kind
    public var reason: String

    public init(kind: Kind, reason: String = "") {
        self.kind = kind
        self.reason = reason
    }
}

/// What happened to one job of an enqueue batch.
public enum EnqueueResult: Sendable, Equatable {
    /// Stored as a job of its own. A job that reports its outcome waits for it (the Test button).
    case queued
    /// Stored as a job of its own, but as an alert that does not report its outcome, although it was posted as a
    /// Test request: the device already has a Test request waiting, or is at its cap (`EnqueuePlan`).
    case queuedAsAlert
    /// A Test request whose push the device's waiting Test job already carries: nothing was stored; the request is
    /// answered with that job's public id.
    case sameAsWaitingTest(publicID: String)
    /// The device holds its cap of live jobs and has no waiting job to fold the alert into (a cap of one or two):
    /// nothing was stored, and only this device's webhook is refused.
    case deviceFull
    /// The device already holds its cap of live jobs (`DEVICE_QUEUE_MAX`): the alert was folded into the device's
    /// newest waiting job, whose push (a digest) accounts for it. Stored and acknowledged, not a job of its own.
    case merged
    /// The device was deleted between the lookup and the commit; nothing was stored.
    case deviceGone

    /// Whether a job row of its own was stored (what QUEUE_MAX counts).
    public var storedAJob: Bool { self == .queued || self == .queuedAsAlert }
}

/// A job leased to a worker, with what is needed to send it.
public struct ClaimedJob: Sendable, Equatable {
    public var id: Int64
    public var publicID: String
    public var deviceID: String
    public var deviceToken: String
    public var downNotificationLevel: Device.DownNotificationLevel
    public var payload: [UInt8]
    /// 1 on the first attempt.
    public var attempt: Int
    public var createdAt: Int64
    public var expiresAt: Int64
    public var reportsOutcome: Bool = false
    /// Alerts folded into this job after its device reached its cap; its push is then a digest.
    public var folded = FoldedAlerts()
    /// The device's down monitors as of this alert (the newest folded one included): the push's `aps.badge`.
    public var badge: Int?
    /// The APNs environment the device's token is known to belong to; nil: the configured one.
    public var environment: Settings.APNsEnvironment?
    /// Pushes APNs accepted for the device in the current minute, by any deliverer (DEVICE_BURST), and the last one.
    public var recentPushes = 0
    public var lastPushAt: Int64?
    /// When this worker's lease on the job ends (ms since 1970): past it another worker may take the job over.
    public var leaseExpiresAt: Int64 = .max
}

/// The result of one attempt, applied with `JobQueue.finish`. Each names the job and the attempt it answers, so a
/// late answer for a lease that expired and was taken over changes nothing.
public struct JobOutcome: Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        /// APNs accepted it: delete the job, record the device's success.
        case delivered
        /// Try again at `at` (milliseconds since 1970), remembering `error`.
        case retry(at: Int64, error: String)
        /// Give up: keep the job as a dead letter with `reason`, record it on the device.
        case deadLetter(reason: String)
        /// Give up without APNs rejecting it (it outlived `JOB_TTL`, its push could not be built): a dead letter
        /// like any other, but a waiting Test request is told the relay did not deliver it, not that APNs refused.
        case abandon(reason: String)
        /// APNs says the token is gone: delete the device and its jobs, leave a tombstone with `reason`. Only while
        /// the device still has the token the push went to (`deviceToken`): one the app replaced meanwhile keeps its
        /// device, and the job goes back to be sent to the new token, its attempt not counted.
        case removeDevice(reason: String)
        /// Not sent: wait until `until` (ms) without counting the attempt (an alert storm gathering into a digest).
        case postpone(until: Int64)
    }

    public var jobID: Int64
    public var attempt: Int
    /// The job's device, public id and whether it reports its outcome, as it was claimed (none of them ever
    /// changes): what completing it needs, so the store does not read them back from the row it deletes.
    public var deviceID: String
    public var publicID: String
    public var reportsOutcome: Bool
    /// The token the push was sent to (what `removeDevice` compares with the device's current one).
    public var deviceToken: String
    public var kind: Kind
    /// Pending jobs of the same device merged into this one's push (an alert-storm digest): they complete with it
    /// (delivered or dead-lettered); on a retry they stay pending and are merged again.
    public var merged: [MergedJob]

    public init(_ job: ClaimedJob, kind: Kind, merged: [MergedJob] = []) {
        self.jobID = job.id
        self.attempt = job.attempt
        self.deviceID = job.deviceID
        self.publicID = job.publicID
        self.reportsOutcome = job.reportsOutcome
        self.deviceToken = job.deviceToken
        self.kind = kind
        self.merged = merged
    }
}

/// A pending job carried by a digest push, as it was read: a job that gained folded alerts since (ingest folds
/// into a device's newest waiting job) is not completed with the digest, so what was folded later is not lost.
public struct MergedJob: Sendable, Equatable {
    public var id: Int64
    public var foldedCount: Int

    public init(id: Int64, foldedCount: Int = 0) {
        self.id = id
        self.foldedCount = foldedCount
    }
}

/// A job waiting behind its device's head, as a digest merges it.
public struct PendingJob: Sendable, Equatable {
    public var id: Int64
    public var payload: [UInt8]
    public var createdAt: Int64
    /// A Test-button job: its waiting request needs its own answer, so a digest stops before it.
    public var reportsOutcome: Bool
    /// Alerts folded into this job after its device reached its cap.
    public var folded: FoldedAlerts
    /// The device's down monitors as of this alert: a digest carries the badge of its last alert.
    public var badge: Int?
    /// Its acceptance + JOB_TTL (later when alerts were folded in after it): a digest that carries it asks APNs to
    /// keep trying an offline phone at least that long.
    public var expiresAt: Int64

    public init(
        id: Int64, payload: [UInt8], createdAt: Int64, reportsOutcome: Bool = false, folded: FoldedAlerts = FoldedAlerts(),
        badge: Int? = nil, expiresAt: Int64
    ) {
        self.expiresAt = expiresAt
        self.id = id
        self.payload = payload
        self.createdAt = createdAt
        self.reportsOutcome = reportsOutcome
        self.folded = folded
        self.badge = badge
    }

    /// How a digest that carries this job names it when it completes.
    public var asMerged: MergedJob { MergedJob(id: id, foldedCount: folded.count) }
}

/// Which dead letters `replay` takes.
public struct DeadLetterFilter: Sendable, Equatable {
    public var reason: String?
    public var deviceID: String?
    /// Only those dead-lettered at or after this time (milliseconds since 1970).
    public var since: Int64?
    /// Only those with a larger id: where a replay that left some behind goes on (`ReplayBatch.lastExamined`).
    public var after: Int64?
    /// Only those with an id up to this one: a replay examines the dead letters there were when it began. What it
    /// requeues gets a new, larger id; one that is dead-lettered again while the replay runs is not replayed twice.
    public var through: Int64?

    public init(reason: String? = nil, deviceID: String? = nil, since: Int64? = nil, after: Int64? = nil, through: Int64? = nil) {
        self.reason = reason
        self.deviceID = deviceID
        self.since = since
        self.after = after
        self.through = through
    }
}

/// What one replay transaction did.
public struct ReplayBatch: Sendable, Equatable {
    /// Dead letters put back in the queue.
    public var replayed: Int
    /// Dead letters left as they are: their device already holds `DEVICE_QUEUE_MAX` live jobs (SPEC §4).
    public var leftAtCap: Int
    /// The largest id examined, nil when no dead letter matched: the next batch starts after it.
    public var lastExamined: Int64?

    public init(replayed: Int, leftAtCap: Int, lastExamined: Int64?) {
        self.replayed = replayed
        self.leftAtCap = leftAtCap
        self.lastExamined = lastExamined
    }
}

/// A snapshot for `stats`.
public struct QueueStats: Sendable, Equatable {
    public var devices: Int
    public var tombstones: Int
    public var jobsByState: [JobState: Int]
    public var deadLettersByReason: [String: Int]
    /// Acceptance time of the oldest job not yet finished (dead letters excluded), if any.
    public var oldestJobCreatedAt: Int64?
}
