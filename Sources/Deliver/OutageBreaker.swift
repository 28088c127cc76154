/// Decides when APNs is down for everyone (SPEC §4 "Outages"), as a state machine with no I/O: the engine
/// reports answers and asks what it may claim. While open, workers stop spending attempts: one probe at a time,
/// spaced with backoff; when a probe succeeds, the breaker closes and the engine sends the whole backlog at once.
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

    public private(set) var state = State.closed
    public private(set) var probeInFlight = false
    private var recent: [Bool] = []   // true = outage-class failure
    let windowSize: Int
    let minimumSamples: Int
    let threshold: Double
    let probeBackoff: Backoff
    let pauseProbeInterval: Int64

    public init(windowSize: Int = 20, minimumSamples: Int = 8, threshold: Double = 0.75,
                probeBackoff: Backoff = Backoff(base: .milliseconds(500), cap: .seconds(5)), pauseProbeInterval: Duration = .seconds(60)) {
        self.windowSize = windowSize
        self.minimumSamples = minimumSamples
        self.threshold = threshold
        self.probeBackoff = probeBackoff
        self.pauseProbeInterval = pauseProbeInterval.wholeMilliseconds
    }

    public func allowance(now: Int64) -> Allowance {
        switch state {
        case .closed: return .normal
        case .open(let next, _), .paused(_, let next): return !probeInFlight && now >= next ? .probe : .nothing
        }
    }

    /// When the next probe is due, for the engine's sleep.
    public var nextProbeAt: Int64? {
        switch state {
        case .closed: return nil
        case .open(let next, _), .paused(_, let next): return probeInFlight ? nil : next
        }
    }

    public mutating func probeSent() { probeInFlight = true }

    public enum Transition: Sendable, Equatable {
        case none
        /// Just opened: stop claiming.
        case opened
        /// Just closed after an outage or pause: make every retrying job due now.
        case recovered
        case paused(reason: String)
    }

    /// Records one answer. `wasProbe`: it answered the probe.
    public mutating func record(_ verdict: Verdict, wasProbe: Bool, now: Int64) -> Transition {
        if wasProbe { probeInFlight = false }
        switch verdict {
        case .pause(let reason):
            let wasPaused = if case .paused = state { true } else { false }
            state = .paused(reason: reason, nextProbeAt: now + pauseProbeInterval)
            return wasPaused ? .none : .paused(reason: reason)
        case .retry(_, outage: true):
            return recordOutageFailure(wasProbe: wasProbe, now: now)
        case .resend, .refreshProviderToken:
            return .none
        default:
            // APNs answered: it is up, whatever it thought of this push.
            recent.append(false)
            trim()
            if state != .closed && wasProbe {
                state = .closed
                recent.removeAll()
                return .recovered
            }
            return .none
        }
    }

    /// Every connection is down and reconnecting fails: as good as an outage.
    public mutating func connectionsDown(now: Int64) -> Transition {
        guard state == .closed else { return .none }
        state = .open(nextProbeAt: now + probeBackoff.ceilingMillis(afterAttempt: 1), failedProbes: 0)
        return .opened
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
        case .paused:
            return .none
        }
    }

    private mutating func trim() {
        if recent.count > windowSize { recent.removeFirst(recent.count - windowSize) }
    }
}
