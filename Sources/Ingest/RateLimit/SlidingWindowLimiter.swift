import Common
import Synchronization

/// Sliding-window rate limits per key (the approximation Fiber and Cloudflare use): the estimate is the previous
/// window's count weighted by how much of it still overlaps the sliding window, plus the current window's count.
/// Several rules (`5/1m,30/1h`) must all allow a request. In memory, per process, like the reference relay.
public final class SlidingWindowLimiter: Sendable {
    public enum Decision: Equatable, Sendable {
        case allowed
        /// Over a limit; try again after this many whole seconds.
        case limited(retryAfterSeconds: Int)
    }

    struct Window: Sendable {
        var start: Int64
        var previous: Int
        var current: Int
    }

    private let rules: [RateLimitRule]
    /// One map of windows per rule.
    private let windows: Mutex<[[String: Window]]>
    private let operations = Atomic<Int>(0)

    public init(rules: [RateLimitRule]) {
        self.rules = rules
        windows = Mutex(Array(repeating: [:], count: rules.count))
    }

    public var isDisabled: Bool { rules.isEmpty }

    /// Counts an event for `key` if every rule allows it; a refused event is not counted, so a client that backs
    /// off is let through again as the window slides.
    public func hit(_ key: String, now: Int64) -> Decision {
        guard !rules.isEmpty else { return .allowed }
        pruneOccasionally(now: now)
        return windows.withLock { windows in
            var worst = 0
            for (index, rule) in rules.enumerated() {
                let window = Self.advanced(windows[index][key], rule: rule, now: now)
                if Self.estimate(window, rule: rule, now: now) + 1 > Double(rule.limit) {
                    worst = max(worst, Self.retryAfter(window, rule: rule, now: now))
                }
            }
            guard worst == 0 else { return .limited(retryAfterSeconds: worst) }
            for (index, rule) in rules.enumerated() {
                var window = Self.advanced(windows[index][key], rule: rule, now: now)
                window.current += 1
                windows[index][key] = window
            }
            return .allowed
        }
    }

    /// Whether `key` is over a limit now, without counting anything (the failed-webhook limiter checks first and
    /// counts only failures).
    public func check(_ key: String, now: Int64) -> Decision {
        guard !rules.isEmpty else { return .allowed }
        return windows.withLock { windows in
            var worst = 0
            for (index, rule) in rules.enumerated() {
                let window = Self.advanced(windows[index][key], rule: rule, now: now)
                if Self.estimate(window, rule: rule, now: now) >= Double(rule.limit) {
                    worst = max(worst, Self.retryAfter(window, rule: rule, now: now))
                }
            }
            return worst == 0 ? .allowed : .limited(retryAfterSeconds: worst)
        }
    }

    /// Counts an event for `key` unconditionally.
    public func record(_ key: String, now: Int64) {
        guard !rules.isEmpty else { return }
        pruneOccasionally(now: now)
        windows.withLock { windows in
            for (index, rule) in rules.enumerated() {
                var window = Self.advanced(windows[index][key], rule: rule, now: now)
                window.current += 1
                windows[index][key] = window
            }
        }
    }

    /// Keys currently tracked (for tests of memory bounds).
    public var trackedKeys: Int { windows.withLock { $0.map(\.count).max() ?? 0 } }

    static func advanced(_ window: Window?, rule: RateLimitRule, now: Int64) -> Window {
        let length = rule.window.wholeMilliseconds
        let start = now - now % length
        guard let window else { return Window(start: start, previous: 0, current: 0) }
        if window.start == start { return window }
        if window.start == start - length { return Window(start: start, previous: window.current, current: 0) }
        return Window(start: start, previous: 0, current: 0)
    }

    static func estimate(_ window: Window, rule: RateLimitRule, now: Int64) -> Double {
        let length = Double(rule.window.wholeMilliseconds)
        let elapsed = Double(now - window.start) / length
        return Double(window.previous) * (1 - elapsed) + Double(window.current)
    }

    /// Seconds until the estimate drops below the limit: within this window if the previous window's weight is
    /// what keeps it high, else at the latest when the next window starts and this one begins to fade.
    static func retryAfter(_ window: Window, rule: RateLimitRule, now: Int64) -> Int {
        let length = rule.window.wholeMilliseconds
        let untilNextWindow = window.start + length - now
        var wait = untilNextWindow
        if window.current < rule.limit, window.previous > 0 {
            // previous * (1 - t/length) + current < limit  ⇔  t > length * (1 - (limit - current) / previous)
            let needed = Double(length) * (1 - Double(rule.limit - window.current) / Double(window.previous))
            wait = max(1, Int64(needed.rounded(.up)) - (now - window.start))
        }
        return max(1, Int((wait + 999) / 1000))
    }

    /// Forgets keys idle for two windows, every 4,096 operations, so memory follows active clients only.
    private func pruneOccasionally(now: Int64) {
        guard operations.add(1, ordering: .relaxed).newValue % 4096 == 0 else { return }
        windows.withLock { windows in
            for (index, rule) in rules.enumerated() {
                let horizon = now - 2 * rule.window.wholeMilliseconds
                windows[index] = windows[index].filter { $0.value.start > horizon }
            }
        }
    }
}
