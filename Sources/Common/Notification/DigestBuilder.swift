/// One push for many alerts to the same device (SPEC §3 "Alert storms"): a title that counts them and a body that
/// lists them in order, within APNs' 4096 bytes. When the list cannot fit, the latest state of each monitor is
/// shown first and the rest is counted (`… and 31 more`), so every alert is accounted for.
public struct DigestBuilder: Sendable {
    public var lateNotice: Duration

    public init(lateNotice: Duration) { self.lateNotice = lateNotice }

    static let separator = " · "

    /// - Parameters:
    ///   - events: the merged alerts, oldest first.
    ///   - firstAcceptedAt: when the oldest was accepted (ms), for the late notice.
    public func digest(_ events: [AlertEvent], timeSensitiveDown: Bool, firstAcceptedAt: Int64, now: Int64) -> PushMessage {
        let wording = PushBuilder(lateNotice: .seconds(Int64.max / 1_000_000))
        let lines = events.map { wording.notification(for: $0, timeSensitiveDown: false, acceptedAt: now, now: now).digestLine }
        let keys = events.map(Self.monitorKey)
        let monitors = Set(keys).count
        let allMonitors = events.allSatisfy { $0.kind == .monitor }
        let title: String
        if allMonitors && monitors == events.count {
            title = "\(events.count) monitors changed"
        } else if allMonitors {
            title = "\(events.count) alerts from \(monitors) monitors"
        } else {
            title = "\(events.count) alerts"
        }
        let anyDown = events.contains { $0.kind == .monitor && $0.status == .down }
        var message = PushMessage(title: title, body: "", interruptionLevel: anyDown && timeSensitiveDown ? .timeSensitive : .active,
                                  threadID: "kumapush-digest")
        if now - firstAcceptedAt > lateNotice.wholeMilliseconds {
            message.bodySuffix = PushBuilder.lateSuffix(acceptedAt: firstAcceptedAt)
        }
        message.body = lines.joined(separator: Self.separator)
        if fits(message) { return message }

        // Too long: each monitor's latest state first (in the order they last changed), then count the rest.
        var latest: [(key: String, line: String)] = []
        for (key, line) in zip(keys, lines) {
            latest.removeAll { $0.key == key }
            latest.append((key, line))
        }
        let ordered = latest.map(\.line)
        var low = 0, high = ordered.count
        while low < high {
            let middle = (low + high + 1) / 2
            message.body = Self.body(ordered, shown: middle, total: events.count)
            if fits(message) { low = middle } else { high = middle - 1 }
        }
        message.body = Self.body(ordered, shown: low, total: events.count)
        return message
    }

    static func body(_ lines: [String], shown: Int, total: Int) -> String {
        let rest = total - shown
        let list = lines.prefix(shown).joined(separator: separator)
        guard rest > 0 else { return list }
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
