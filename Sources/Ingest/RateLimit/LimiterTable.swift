import Common

/// One key's count under one rule: this window's events and the previous window's.
struct LimiterWindow: Sendable {
    var start: Int64
    var previous: Int
    var current: Int

    static func fresh(rule: RateLimitRule, now: Int64) -> LimiterWindow {
        let length = rule.window.wholeMilliseconds
        return LimiterWindow(start: now - now % length, previous: 0, current: 0)
    }

    /// The window as it stands at `now`: rolled over once a new window has started, forgotten after two.
    func advanced(rule: RateLimitRule, now: Int64) -> LimiterWindow {
        let length = rule.window.wholeMilliseconds
        let start = now - now % length
        if self.start == start { return self }
        if self.start == start - length { return LimiterWindow(start: start, previous: current, current: 0) }
        return LimiterWindow(start: start, previous: 0, current: 0)
    }

    /// Events in the sliding window ending at `now` (the window must be advanced to `now`).
    func estimate(rule: RateLimitRule, now: Int64) -> Double {
        let elapsed = Double(now - start) / Double(rule.window.wholeMilliseconds)
        return Double(previous) * (1 - elapsed) + Double(current)
    }

    /// Seconds until an event is let through again: until the estimate plus `headroom` is within the limit (1 for a
    /// hit, which counts itself; a hair above 0 for a check, which needs the estimate strictly under the limit). In this window while only the previous window's fading weight
    /// is in the way; otherwise in the next one, once this window's count has faded enough there. A client that
    /// waits exactly this long is let through (it was told too little before: at the start of the next window this
    /// window still weighs fully).
    func retryAfter(rule: RateLimitRule, now: Int64, headroom: Double) -> Int {
        let length = Double(rule.window.wholeMilliseconds)
        let room = Double(rule.limit) - headroom
        let wait: Double
        if Double(current) <= room {
            // previous · (1 − t/length) + current ≤ room  ⇔  t ≥ length · (1 − (room − current) / previous)
            let needed = previous > 0 ? length * (1 - (room - Double(current)) / Double(previous)) : 0
            wait = needed - Double(now - start)
        } else {
            // Next window: current · (1 − t/length) ≤ room  ⇔  t ≥ length · (1 − room / current)
            wait = Double(start - now) + length + length * (1 - max(room, 0) / Double(current))
        }
        return max(1, Int((wait / 1000).rounded(.up)))
    }
}

/// The limiter's state: at most `capacity` keys, whatever arrives (SPEC §2.4, issue 13).
///
/// A new key in a full table takes the slot of the least-loaded entry among the next `evictionSample` ones (a
/// clock hand walks the table, so every entry is looked at in turn), and never the slot of an entry at or over a
/// limit. So filling the table cannot reset anyone's limit: idle and light clients are forgotten first, and
/// pushing out a key costs the pusher more events than that key had been allowed. When no sampled entry may go,
/// the new key shares the `overflow` windows with every other key that found no room: stricter for them, looser
/// for nobody.
struct LimiterTable: Sendable {
    struct Entry: Sendable {
        var key: String
        var windows: [LimiterWindow]
    }

    static let evictionSample = 16

    let rules: [RateLimitRule]
    let capacity: Int
    private var entries: [Entry] = []
    private var slots: [String: Int] = [:]
    private var overflow: [LimiterWindow]
    private var hand = 0

    init(rules: [RateLimitRule], capacity: Int) {
        self.rules = rules
        self.capacity = max(1, capacity)
        overflow = rules.map { LimiterWindow.fresh(rule: $0, now: 0) }
    }

    var count: Int { entries.count }

    /// The windows that decide for `key` at `now`, without creating state: its own, or for a key that would find
    /// no room, the shared overflow; nil when it has none yet.
    func windows(of key: String, now: Int64) -> [LimiterWindow]? {
        if let slot = slots[key] { return advanced(entries[slot].windows, now: now) }
        guard entries.count >= capacity else { return nil }
        return advanced(overflow, now: now)
    }

    /// Runs `body` on `key`'s windows (advanced to `now`), creating them if need be.
    mutating func update<Result>(_ key: String, now: Int64, _ body: (inout [LimiterWindow]) -> Result) -> Result {
        if let slot = slots[key] {
            // In place: this is every webhook's path, and a copy would allocate.
            for (index, rule) in rules.enumerated() {
                entries[slot].windows[index] = entries[slot].windows[index].advanced(rule: rule, now: now)
            }
            return body(&entries[slot].windows)
        }
        let fresh = rules.map { LimiterWindow.fresh(rule: $0, now: now) }
        if entries.count < capacity {
            entries.append(Entry(key: key, windows: fresh))
            slots[key] = entries.count - 1
            return body(&entries[entries.count - 1].windows)
        }
        if let victim = evictableSlot(now: now) {
            slots[entries[victim].key] = nil
            entries[victim] = Entry(key: key, windows: fresh)
            slots[key] = victim
            return body(&entries[victim].windows)
        }
        overflow = advanced(overflow, now: now)
        return body(&overflow)
    }

    /// The least-loaded of the next `evictionSample` entries from the clock hand, unless even that one is at a limit.
    private mutating func evictableSlot(now: Int64) -> Int? {
        let sample = min(Self.evictionSample, entries.count)
        var best: (slot: Int, load: Double)?
        for step in 0..<sample {
            let slot = (hand + step) % entries.count
            let load = self.load(entries[slot].windows, now: now)
            if best == nil || load < best!.load { best = (slot, load) }
            if load == 0 { break }
        }
        hand = (hand + sample) % entries.count
        guard let best, best.load < 1 else { return nil }
        return best.slot
    }

    /// How close windows are to their limits: 1 means some rule is at its limit.
    private func load(_ windows: [LimiterWindow], now: Int64) -> Double {
        zip(windows, rules).map { window, rule in
            window.advanced(rule: rule, now: now).estimate(rule: rule, now: now) / Double(rule.limit)
        }.max() ?? 0
    }

    private func advanced(_ windows: [LimiterWindow], now: Int64) -> [LimiterWindow] {
        zip(windows, rules).map { $0.advanced(rule: $1, now: now) }
    }
}
