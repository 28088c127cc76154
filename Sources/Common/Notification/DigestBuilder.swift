/// One push for many alerts to the same device (SPEC §3 "Alert storms"): a title that counts them by state
/// (`1,000 monitors changed: 998 down, 2 up`) and a body that lists them in order, within APNs' 4096 bytes. When
/// the list cannot fit, the latest state of each monitor is shown first and the rest is counted
/// (`… and 31 more`), so every alert is accounted for.
public struct DigestBuilder: Sendable {
    public var lateNotice: Duration

    public init(lateNotice: Duration) { self.lateNotice = lateNotice }

    static let separator = " · "

    /// - Parameters:
    ///   - events: the merged alerts, oldest first.
    ///   - uncounted: alerts folded beyond what was kept of them (SPEC §2.4 `DEVICE_QUEUE_MAX`): counted, not listed.
    ///   - firstAcceptedAt: when the oldest was accepted (ms), for the late notice.
    ///   - badge: the push's `aps.badge`, part of the payload the list must fit beside.
    public func digest(
        _ events: [AlertEvent], uncounted: StatusTally = StatusTally(), timeSensitiveDown: Bool,
        firstAcceptedAt: Int64, now: Int64, badge: Int? = nil
    ) -> PushMessage {
        let wording = PushBuilder(lateNotice: .seconds(Int64.max / 1_000_000))
        let lines = events.map { wording.notification(for: $0, timeSensitiveDown: false, acceptedAt: now, now: now).digestLine }
        let keys = events.map(Self.monitorKey)
        let total = events.count + uncounted.total
        let title = Self.title(events, keys: keys, uncounted: uncounted)
        let anyDown = events.contains { $0.kind == .monitor && $0.status == .down } || uncounted.down > 0
        var message = PushMessage(
            title: title, body: "", interruptionLevel: anyDown && timeSensitiveDown ? .timeSensitive : .active,
            threadID: "kumapush-digest")
        // Sized with the badge in: added afterwards, it pushed a list that just fit over the limit, and the encoder
        // cut the body's end — the count of the rest, with it the promise that every alert is accounted for.
        message.badge = badge
        if now - firstAcceptedAt > lateNotice.wholeMilliseconds {
            message.bodySuffix = PushBuilder.lateSuffix(acceptedAt: firstAcceptedAt)
        }
        message.body = Self.body(lines, shown: lines.count, total: total)
        if fits(message) { return message }

        // Too long: each monitor's latest state first (in the order they last changed), then count the rest.
        var latest: [(key: String, line: String)] = []
        for (key, line) in zip(keys, lines) {
            latest.removeAll { $0.key == key }
            latest.append((key, line))
        }
        let ordered = latest.map(\.line)
        var low = 0
        var high = ordered.count
        while low < high {
            let middle = (low + high + 1) / 2
            message.body = Self.body(ordered, shown: middle, total: total)
            if fits(message) { low = middle } else { high = middle - 1 }
        }
        message.body = Self.body(ordered, shown: low, total: total)
        return message
    }

    /// `12 monitors changed: 10 down, 2 up`, `5 alerts from 2 monitors: 3 down, 2 up`, or `3 alerts` for tests and
    /// generic pushes — and whenever some folded alerts were kept only as counts, since then nobody knows how many
    /// distinct monitors they came from (`2,751 alerts: 1,251 down, 1,500 up`, never more monitors than exist).
    static func title(_ events: [AlertEvent], keys: [String], uncounted: StatusTally) -> String {
        let total = events.count + uncounted.total
        var tally = uncounted
        for event in events { tally.add(event.kind == .monitor ? event.status : nil) }
        let allMonitors = tally.other == 0
        let monitors = Set(keys).count
        let count = CountText.grouped(total)
        let title: String
        if allMonitors && monitors == events.count && uncounted.total == 0 {
            title = "\(count) monitors changed"
        } else if allMonitors && uncounted.total == 0 {
            title = "\(count) alerts from \(CountText.grouped(monitors)) monitors"
        } else {
            title = "\(count) alerts"
        }
        let summary = tally.summary
        return summary.isEmpty ? title : "\(title): \(summary)"
    }

    static func body(_ lines: [String], shown: Int, total: Int) -> String {
        let rest = CountText.grouped(total - shown)
        let list = lines.prefix(shown).joined(separator: separator)
        guard total > shown else { return list }
        return list.isEmpty ? "\(rest) alerts" : list + " … and \(rest) more"
    }

    private func fits(_ message: PushMessage) -> Bool {
        !APNsPayload.needsCut(message)
    }

    /// The same monitor across alerts: its id, else its name; tests and generic pushes each stand alone.
    static func monitorKey(_ event: AlertEvent) -> String {
        guard event.kind == .monitor else { return "other:\(event.title)|\(event.message)" }
        if let id = event.monitorID { return "id:\(id)" }
        return "name:\(event.monitorName)"
    }
}

extension PushMessage {
    /// How this push reads as one entry of a digest: the title, or for tests and generic pushes without a title
    /// of their own, the message.
    var digestLine: String { title == "KumaPush" && !body.isEmpty ? body : title }
}
