import Common

/// Exponential backoff with full jitter (AWS Architecture Blog, "Exponential Backoff And Jitter"): the delay before
/// attempt n+1 is uniform in [0, min(cap, base × 2^(n-1))]. Full jitter spreads a crowd of retries after an outage
/// instead of sending them back in synchronized waves.
///
/// With the defaults (base 1 s, cap 5 min) the upper bounds are: attempt 1 → 1 s, 2 → 2 s, 3 → 4 s, 5 → 16 s,
/// 8 → 128 s, 9 and later → 300 s.
public struct Backoff: Sendable {
    public var base: Duration
    public var cap: Duration

    public init(base: Duration, cap: Duration) {
        self.base = base
        self.cap = cap
    }

    /// The largest delay after `attempt` failed attempts (attempt ≥ 1), in milliseconds.
    public func ceilingMillis(afterAttempt attempt: Int) -> Int64 {
        let capMillis = cap.wholeMilliseconds
        let exponent = min(max(attempt - 1, 0), 40)
        // Compare before multiplying so large attempts cannot overflow.
        let baseMillis = max(base.wholeMilliseconds, 1)
        if exponent >= 62 || baseMillis > capMillis >> Int64(exponent) { return capMillis }
        return min(capMillis, baseMillis << Int64(exponent))
    }

    /// A delay drawn with full jitter, using `random` (a number in 0...1) so tests can pin it.
    public func delayMillis(afterAttempt attempt: Int, random: Double = Double.random(in: 0...1)) -> Int64 {
        Int64((Double(ceilingMillis(afterAttempt: attempt)) * min(max(random, 0), 1)).rounded())
    }
}
