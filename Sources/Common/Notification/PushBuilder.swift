/// Turns a stored `AlertEvent` into the push the phone shows (SPEC §3).
public struct PushBuilder: Sendable {
    /// Pushes sent later than this after their webhook arrived say so in the body.
    public var lateNotice: Duration

    public init(lateNotice: Duration) { self.lateNotice = lateNotice }

    /// - Parameters:
    ///   - timeSensitiveDown: the device asked for down alerts at `time-sensitive` level.
    ///   - acceptedAt: when the webhook was accepted (ms since 1970); `now`: when the push is being sent.
    public func notification(for event: AlertEvent, timeSensitiveDown: Bool, acceptedAt: Int64, now: Int64) -> PushMessage {
        var result: PushMessage
        switch event.kind {
        case .monitor:
            let name = Self.displayName(event)
            let title: String
            switch event.status {
            case .up: title = "\(name) is up"
            case .down: title = event.important ? "\(name) is down" : "\(name) is still down"
            case .pending: title = "\(name) is pending"
            case .maintenance: title = "\(name) is under maintenance"
            case nil: title = "\(name) changed state"
            }
            let level: PushMessage.InterruptionLevel = event.status == .down && timeSensitiveDown ? .timeSensitive : .active
            result = PushMessage(title: title, body: event.message, interruptionLevel: level, threadID: Self.threadID(event))
        case .test:
            result = PushMessage(title: "KumaPush", body: event.message.isEmpty ? "Test notification" : event.message)
        case .generic:
            result = PushMessage(title: event.title.isEmpty ? "KumaPush" : event.title, body: event.message)
        }
        // Compared as Durations: `lateNotice.wholeMilliseconds` divided a 128-bit number on every push.
        if Duration.milliseconds(now - acceptedAt) > lateNotice {
            result.bodySuffix = Self.lateSuffix(acceptedAt: acceptedAt)
        }
        return result
    }

    /// ` · delayed, event at 14:03 UTC`
    public static func lateSuffix(acceptedAt: Int64) -> String {
        " · delayed, event at \(RFC3339.clockString(epochMillis: acceptedAt)) UTC"
    }

    /// The monitor's name, or something recognisable when Uptime Kuma sent none.
    static func displayName(_ event: AlertEvent) -> String {
        if !event.monitorName.isEmpty { return event.monitorName }
        return event.monitorID.map { "Monitor \($0)" } ?? "A monitor"
    }

    /// `monitor-12` from the id, else `monitor-<name>` with the name cut to `threadNameLimit` bytes: a thread id
    /// only groups banners, and an uncut one let a long monitor name push the payload past 4096 bytes.
    static func threadID(_ event: AlertEvent) -> String? {
        if let id = event.monitorID { return "monitor-\(id)" }
        return event.monitorName.isEmpty ? nil : "monitor-" + TextCut.prefix(event.monitorName, maxBytes: threadNameLimit)
    }

    static let threadNameLimit = 64
}
