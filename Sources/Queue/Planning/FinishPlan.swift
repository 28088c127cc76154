/// What `finish` does with a batch of APNs outcomes, decided once for both stores (River's shape: the executor
/// decides a job's fate, the driver gets typed writes).
///
/// Each store reads `State` inside its write transaction, before any write (SQLite in its single writer;
/// PostgreSQL in one round trip that locks the jobs after their devices, so nothing moves between the read and the
/// writes), hands it here with the outcomes, and applies the writes in its own dialect, in the order
/// `FinishPlan`'s fields are listed: the jobs' own writes, the reports, the settlements, the devices' updates, the
/// promotions, the removals. Settling before promoting matters: a merged job still pending when the next job is
/// promoted would become its device's head and go out twice.
struct FinishPlan: Sendable, Equatable {
    /// What the store read for the batch.
    struct State: Sendable, Equatable {
        /// The outcomes' jobs this worker holds now (running, leased by it): job id → the attempt it holds.
        var held: [Int64: Int]
        /// The current token of the devices of `removeDevice` outcomes whose jobs are held; absent: the device is gone.
        var tokens: [String: String] = [:]
    }

    struct Retry: Sendable, Equatable {
        var jobID: Int64
        var at: Int64
        var error: String
    }

    /// A head dead-lettered with its reason.
    struct Discard: Sendable, Equatable {
        var jobID: Int64
        var reason: String
    }

    /// A job handed back unsent, due at `until`, its attempt not counted.
    struct GiveBack: Sendable, Equatable {
        var jobID: Int64
        var until: Int64
    }

    /// The final outcome of a job a Test request waits on.
    struct Report: Sendable, Equatable {
        var publicID: String
        var kind: ReportedOutcome.Kind
        var reason: String
    }

    /// The jobs a digest carried, completed with its head: deleted (`deadLetterReason` nil) or dead-lettered. Only
    /// those still pending on `device` with the folded alerts the digest carried (a job that gained alerts since
    /// stays and goes out again with them); the store takes what it settled off the device's live jobs.
    struct Settlement: Sendable, Equatable {
        var device: String
        var jobs: [MergedJob]
        var deadLetterReason: String?
        /// The head's attempt: how many times the push that carried them was tried. A dead-lettered one keeps it
        /// (`dead-letters list` says after how many attempts; its own count stayed 0, never claimed itself).
        var attempt: Int
    }

    /// A device's head dead-lettered: its last delivery error, and `heads` live jobs fewer.
    struct DeviceError: Sendable, Equatable {
        var device: String
        var reason: String
        var heads: Int
    }

    /// The head `afterJob` left its device (delivered, dead-lettered): the device's oldest pending job becomes head.
    struct Promotion: Sendable, Equatable {
        var device: String
        var afterJob: Int64
    }

    /// APNs said the device's token is gone: a tombstone with `reason`, and the device deleted with its jobs (its
    /// waiting Test requests told `unregistered`).
    struct Removal: Sendable, Equatable {
        var device: String
        var reason: String
    }

    /// For each outcome, whether it applied (its job was still held at that attempt): `finish`'s answer.
    var applied: [Bool] = []
    /// Delivered heads to delete.
    var deletes: [Int64] = []
    var retries: [Retry] = []
    var discards: [Discard] = []
    var giveBacks: [GiveBack] = []
    var reports: [Report] = []
    var settlements: [Settlement] = []
    /// Device → heads delivered: one success update per device (its last success is the batch's `now`), which also
    /// takes them off its live jobs.
    var successes: [String: Int] = [:]
    var deviceErrors: [DeviceError] = []
    var promotions: [Promotion] = []
    var removals: [Removal] = []

    /// The devices whose token the store must read: those of the `removeDevice` outcomes.
    static func devicesToReadTokensOf(_ outcomes: [JobOutcome]) -> Set<String> {
        Set(outcomes.filter { if case .removeDevice = $0.kind { true } else { false } }.map(\.deviceID))
    }

    /// The rule. An outcome applies only while its job is held by this worker at the attempt it answers (a late
    /// answer for a lease that expired and was taken over changes nothing), and a job is acted on once.
    static func plan(_ outcomes: [JobOutcome], _ state: State, now: Int64) -> FinishPlan {
        var plan = FinishPlan()
        var held = state.held
        for outcome in outcomes {
            let isHeld = held[outcome.jobID] == outcome.attempt
            plan.applied.append(isHeld)
            guard isHeld else { continue }
            held[outcome.jobID] = nil
            plan.add(outcome, tokens: state.tokens, now: now)
        }
        return plan
    }

    private mutating func add(_ outcome: JobOutcome, tokens: [String: String], now: Int64) {
        let job = outcome.jobID
        let device = outcome.deviceID
        switch outcome.kind {
        case .delivered:
            deletes.append(job)
            report(outcome, .delivered, "")
            settle(outcome, deadLetterReason: nil)
            successes[device, default: 0] += 1
            promotions.append(Promotion(device: device, afterJob: job))
        case .retry(let at, let error):
            retries.append(Retry(jobID: job, at: at, error: error))
        case .deadLetter(let reason), .abandon(let reason):
            discards.append(Discard(jobID: job, reason: reason))
            let kind: ReportedOutcome.Kind = if case .abandon = outcome.kind { .failed } else { .rejected }
            report(outcome, kind, reason)
            settle(outcome, deadLetterReason: reason)
            deviceErrors.append(DeviceError(device: device, reason: reason, heads: 1))
            promotions.append(Promotion(device: device, afterJob: job))
        case .postpone(let until):
            giveBacks.append(GiveBack(jobID: job, until: until))
        case .removeDevice(let reason):
            // APNs refused a token the app has replaced since (PATCH): the device stays, and the job goes back to
            // be sent to the new token, its attempt not counted. A device already gone is removed again (a no-op
            // but for the tombstone, which tells the app why).
            if let current = tokens[device], current != outcome.deviceToken {
                giveBacks.append(GiveBack(jobID: job, until: now))
                return
            }
            report(outcome, .unregistered, reason)
            removals.append(Removal(device: device, reason: reason))
        }
    }

    private mutating func report(_ outcome: JobOutcome, _ kind: ReportedOutcome.Kind, _ reason: String) {
        guard outcome.reportsOutcome else { return }
        reports.append(Report(publicID: outcome.publicID, kind: kind, reason: reason))
    }

    private mutating func settle(_ outcome: JobOutcome, deadLetterReason: String?) {
        guard !outcome.merged.isEmpty else { return }
        settlements.append(
            Settlement(device: outcome.deviceID, jobs: outcome.merged, deadLetterReason: deadLetterReason, attempt: outcome.attempt))
    }
}
