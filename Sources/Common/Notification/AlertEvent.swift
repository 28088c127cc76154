/// What a webhook said, as stored in the job and turned into a push at send time (so a late push can say it is
/// late). Ingest decides the shape; the deliverer decides the words.
public struct AlertEvent: Sendable, Equatable, Codable {
    public enum Kind: String, Sendable, Codable {
        /// A monitor changed state (Uptime Kuma's heartbeat + monitor).
        case monitor
        /// No heartbeat or no monitor: the Test button, certificate or domain expiry. Carries `message` only.
        case test
        /// A plain `{title, body}` object from any other sender.
        case generic
    }

    /// Uptime Kuma's heartbeat statuses.
    public enum Status: Int, Sendable, Codable {
        case down = 0, up = 1, pending = 2, maintenance = 3
    }

    public var kind: Kind
    /// Monitor events: the heartbeat status (nil when Uptime Kuma sent one this relay does not know).
    public var status: Status?
    /// Monitor events: false for Uptime Kuma's "still down" resend reminders.
    public var important: Bool
    public var monitorID: Int?
    public var monitorName: String
    /// Generic events: the sender's title ("" for the default).
    public var title: String
    /// heartbeat.msg for monitor events, msg for tests, body for generic events.
    public var message: String

    public init(kind: Kind, status: Status? = nil, important: Bool = true, monitorID: Int? = nil, monitorName: String = "",
                title: String = "", message: String) {
        self.kind = kind
        self.status = status
        self.important = important
        self.monitorID = monitorID
        self.monitorName = monitorName
        self.title = title
        self.message = message
    }

    public static func test(_ message: String) -> AlertEvent { AlertEvent(kind: .test, message: message) }

    /// Tests wait for APNs' answer so the Test button shows real errors (SPEC §2.2); real alerts never wait.
    public var waitsForDelivery: Bool { kind == .test }

    enum CodingKeys: String, CodingKey {
        case kind = "k", status = "s", important = "i", monitorID = "id", monitorName = "n", title = "t", message = "m"
    }
}
