import Common
import Synchronization

/// Sliding-window rate limits per key (the approximation Fiber and Cloudflare use): the estimate is the previous
/// window's count weighted by how much of it still overlaps the sliding window, plus the current window's count.
/// Several rules (`5/1m,30/1h`) must all allow a request. In memory, per process, like the reference relay.
///
/// The keys come from outside (client addresses, device ids), so the state is a fixed-capacity table
/// (`LimiterTable`): memory stays bounded whatever the number of keys seen, and its eviction never forgets a key that
/// is being limited (SPEC §2.4).
public final class SlidingWindowLimiter: Sendable {
    public enum Decision: Equatable, Sendable {
        case allowed
        /// Over a limit; try again after this many whole seconds.
        case limited(retryAfterSeconds: Int)
    }

    /// Keys tracked at most. A key is an IPv4 address, an IPv6 /64 or such a prefix plus a device id, so one entry
    /// is about a hundred bytes: 16,384 entries cost under 2 MiB per limiter.
    public static let defaultCapacity = 16_384

    private let rules: [RateLimitRule]
    private let table: Mutex<LimiterTable>

    public init(rules: [RateLimitRule], capacity: Int = SlidingWindowLimiter.defaultCapacity) {
        self.rules = rules
        table = Mutex(LimiterTable(rules: rules, capacity: capacity))
    }

    public var isDisabled: Bool { rules.isEmpty }

    /// Counts an event for `key` if every rule allows it; a refused event is not counted, so a client that backs
    /// off is let through again as the window slides.
    public func hit(_ key: String, now: Int64) -> Decision {
        guard !rules.isEmpty else { return .allowed }
        return table.withLock { table in
            table.update(key, now: now) { windows in
                let decision = Self.decision(windows, rules: rules, now: now, counting: true)
                if decision == .allowed { for index in windows.indices { windows[index].current += 1 } }
                return decision
            }
        }
    }

    /// Whether `key` is over a limit now, without counting anything (the failed-webhook limiter checks first and
    /// counts only failures). Creates no state for a key it has not seen.
    public func check(_ key: String, now: Int64) -> Decision {
        guard !rules.isEmpty else { return .allowed }
        return table.withLock { table in
            guard let windows = table.windows(of: key, now: now) else { return .allowed }
            return Self.decision(windows, rules: rules, now: now, counting: false)
        }
    }

    /// Counts an event for `key` unconditionally.
    public func record(_ key: String, now: Int64) {
        guard !rules.isEmpty else { return }
        table.withLock { table in
            table.update(key, now: now) { windows in
                for index in windows.indices { windows[index].current += 1 }
            }
        }
    }

    /// Keys currently tracked (for tests of memory bounds).
    public var trackedKeys: Int { table.withLock { $0.count } }

    /// `counting`: whether the event being decided would add one (a hit) or only looks (a check).
    private static func decision(_ windows: [LimiterWindow], rules: [RateLimitRule], now: Int64, counting: Bool) -> Decision {
        var worst = 0
        for (window, rule) in zip(windows, rules) {
            let estimate = window.estimate(rule: rule, now: now) + (counting ? 1 : 0.001)
            if counting ? estimate > Double(rule.limit) : estimate >= Double(rule.limit) {
                worst = max(worst, window.retryAfter(rule: rule, now: now, headroom: counting ? 1 : 0.001))
            }
        }
        return worst == 0 ? .allowed : .limited(retryAfterSeconds: worst)
    }
}
