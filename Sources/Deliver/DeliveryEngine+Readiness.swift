import Common

/// Whether this deliverer is doing its job (SPEC §2.3 `/readyz` on the metrics listener of deliver and serve). The
/// database half is asked by the caller (it blocks); these are the deliverer's own verdicts, readable from any thread.
extension DeliveryEngine {
    public enum Readiness: Equatable, Sendable {
        case ready
        /// The stall detector fired and APNs has not answered since (SPEC §4 "Delivery never stalls").
        case stalled
        /// A configuration fault (403 token errors, `BadTopic`, …) paused delivery; the reason is APNs'.
        case paused(reason: String)
    }

    public var readiness: Readiness {
        if stalled.load(ordering: .relaxed) { return .stalled }
        if let reason = publishedPause.withLock({ $0 }) { return .paused(reason: reason) }
        return .ready
    }

    /// Copies the breaker's pause out of the loop's confinement. On the loop, once a second.
    func publishReadiness() {
        let reason: String? =
            if case .paused(let reason, _) = loopState.breaker.state { reason } else { nil }
        publishedPause.withLock { $0 = reason }
        let open: Bool = if case .open = loopState.breaker.state { true } else { false }
        publishedOutage.store(open, ordering: .relaxed)
    }
}
