/// Decides when APNs is down for everyone (SPEC §4 "Outages"), as a state machine with no I/O: the engine
/// reports APNs' answers and asks what it may claim. While open, workers stop spending attempts: one probe at a
/// time, spaced with backoff; when APNs answers anything that is not an outage, the breaker closes and the engine
/// sends the whole backlog at once.
///
/// Every state has a way out (SPEC §4 "Delivery never stalls"): the breaker is driven by APNs' answers, never by
/// a job's fate. A probe that ends without an answer (its job expired, could not be built, was postponed, lost
/// its device) is given back with `probeEnded`, and a probe that gets no word at all within `probeTimeout` is
/// taken as lost, so the next job probes. With nothing queued, allowance stays `.probe`: the next job to arrive
/// is the probe.
public struct OutageBreaker: Sendable {
    public enum State: Sendable, Equatable {
        case closed
        /// Failing for everyone: probe at `nextProbeAt` (ms).
        case open(nextProbeAt: Int64, failedProbes: Int)
        /// A configuration fault (bad key, team or topic): probe rarely, at `nextProbeAt`.
        case paused(reason: String, nextProbeAt: Int64)
    }

    /// What the engine may claim now.
    public enum Allowance: Sendable, Equatable {
        case normal
        /// Exactly one job, as a probe.
        case probe
        case nothing
    }

    /// The push sent to find out whether APNs is back.
    public struct Probe: Sendable, Equatable {
        public let jobID: Int64
        public let sentAt: Int64
    }

    public private(set) var state = State.closed
    public private(set) var probe: Probe?
    private var recent: [Bool] = []  // true = outage-class failure
    let windowSize: Int
    let minimumSamples: Int
    let threshold: Double
    let probeBackoff: Backoff
    let pauseProbeInterval: Int64
    let probeTimeout: Int64

    /// - Parameter probeTimeout: a probe with no word from APNs for this long is taken as lost (a little over the
    ///   APNs request timeout, which answers every request that was written).
    public init(
        windowSize: Int = 20, minimumSamples: Int = 8, threshold: Double = 0.75,
        probeBackoff: Backoff = Backoff(base: .milliseconds(500), cap: .seconds(5)), pauseProbeInterval: Duration = .seconds(60),
        probeTimeout: Duration = .seconds(35)
    ) {
        self.windowSize = windowSize
        self.minimumSamples = minimumSamples
        self.threshold = threshold
        self.probeBackoff = probeBackoff
        self.pauseProbeInterval = pauseProbeInterval.wholeMilliseconds
        self.probeTimeout = probeTimeout.wholeMilliseconds
    }

    public var isClosed: Bool { state == .closed }

    public var isPaused: Bool {
        if case .paused = state { return true }
        return false
    }

    public func allowance(now: Int64) -> Allowance {
        switch state {
        case .closed: return .normal
        case .open(let next, _), .paused(_, let next): return !probeOutstanding(now: now) && now >= next ? .probe : .nothing
        }
    }

    /// When the engine should look again: the next probe, or the moment an outstanding probe counts as lost.
    public var nextProbeAt: Int64? {
        switch state {
        case .closed: return nil
        case .open(let next, _), .paused(_, let next):
            guard let probe else { return next }
            return max(next, probe.sentAt + probeTimeout)
        }
    }

    private func probeOutstanding(now: Int64) -> Bool {
        guard let probe else { return false }
        return now - probe.sentAt < probeTimeout
    }

    public mutating func probeSent(jobID: Int64, now: Int64) {
        probe = Probe(jobID: jobID, sentAt: now)
    }

    /// The probe's job ended without an answer from APNs: it tells nothing about APNs, so the next job probes
    /// at once (the probe's spacing already passed when it was sent).
    public mutating func probeEnded(jobID: Int64) {
        guard probe?.jobID == jobID else { return }
        probe = nil
    }

    public enum Transition: Sendable, Equatable {
        case none
        /// Just opened: stop claiming.
        case opened
        /// Just closed after an outage or pause: make every retrying job due now.
        case recovered
        case paused(reason: String)
    }

    /// Records one APNs answer (or transport failure) for the push of `jobID`.
    public mutating func record(_ verdict: Verdict, jobID: Int64, now: Int64) -> Transition {
        switch verdict {
        case .resend, .refreshProviderToken:
            // Not an answer about APNs' health: the push goes out again (a probe stays the probe).
            return .none
        default:
            break
        }
        let wasProbe = probe?.jobID == jobID
        if wasProbe { probe = nil }
        switch verdict {
        case .pause(let reason):
            let wasPaused = isPaused
            state = .paused(reason: reason, nextProbeAt: now + pauseProbeInterval)
            return wasPaused ? .none : .paused(reason: reason)
        case .retry(_, outage: true):
            return recordOutageFailure(wasProbe: wasProbe, now: now)
        default:
            // APNs answered: it is up, whatever it thought of this push — probe or not.
            recent.append(false)
            trim()
            guard state != .closed else { return .none }
            reset()
            return .recovered
        }
    }

    /// Every connection is down and reconnecting fails: as good as an outage.
    public mutating func connectionsDown(now: Int64) -> Transition {
        guard state == .closed else { return .none }
        state = .open(nextProbeAt: now + probeBackoff.ceilingMillis(afterAttempt: 1), failedProbes: 0)
        return .opened
    }

    /// Back to closed with no memory (the stall detector's reset, or a recovery).
    public mutating func reset() {
        state = .closed
        probe = nil
        recent.removeAll()
    }

    private mutating func recordOutageFailure(wasProbe: Bool, now: Int64) -> Transition {
        switch state {
        case .closed:
            recent.append(true)
            trim()
            let failures = recent.filter { $0 }.count
            guard recent.count >= minimumSamples, Double(failures) / Double(recent.count) >= threshold else { return .none }
            state = .open(nextProbeAt: now + probeBackoff.ceilingMillis(afterAttempt: 1), failedProbes: 0)
            return .opened
        case .open(let next, let failed):
            guard wasProbe else { return .none }
            state = .open(nextProbeAt: max(next, now + probeBackoff.ceilingMillis(afterAttempt: failed + 2)), failedProbes: failed + 1)
            return .none
        case .paused(let reason, let next):
            // A pause's probe met an outage instead (APNs down as well): the next one still waits its interval.
            guard wasProbe else { return .none }
            state = .paused(reason: reason, nextProbeAt: max(next, now + pauseProbeInterval))
            return .none
        }
    }

    private mutating func trim() {
        if recent.count > windowSize { recent.removeFirst(recent.count - windowSize) }
    }
}
