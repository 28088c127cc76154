/// What a webhook said, as stored in the job and turned into a push at send time (so a late push can say it is
/// late). Ingest decides the shape; the deliverer decides the words.
public struct AlertEvent: Sendable, Equatable {
    public enum Kind: String, Sendable {
        /// A monitor changed state (Uptime Kuma's heartbeat + monitor).
        case monitor
        /// No heartbeat or no monitor: the Test button, certificate or domain expiry. Carries `message` only.
        case test
        /// A plain `{title, body}` object from any other sender.
        case generic
    }

    /// Uptime Kuma's heartbeat statuses.
    public enum Status: Int, Sendable {
        case down = 0
        case up = 1
        case pending = 2
        case maintenance = 3
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

    public init(
        kind: Kind, status: Status? = nil, important: Bool = true, monitorID: Int? = nil, monitorName: String = "",
        title: String = "", message: String
    ) {
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

    /// The job payload: compact JSON, written and read by hand on the hot path (Foundation's coders cost more
    /// than the rest of a webhook). Keys: k kind, s status, i important, id monitor id, n name, t title, m message.
    /// Written into one byte buffer (once per webhook, on ingest's hot path; concatenated Strings cost 10,000
    /// instructions a webhook in callgrind).
    public var jobPayload: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(48 + monitorName.utf8.count + title.utf8.count + message.utf8.count)
        out += #"{"k":""#.utf8
        out += kind.rawValue.utf8
        out.append(UInt8(ascii: "\""))
        if let status { out += #","s":\#(status.rawValue)"#.utf8 }
        if !important { out += #","i":false"#.utf8 }
        if let monitorID { out += #","id":\#(monitorID)"#.utf8 }
        if !monitorName.isEmpty {
            out += #","n":"#.utf8
            JSONText.appendQuoted(monitorName, to: &out)
        }
        if !title.isEmpty {
            out += #","t":"#.utf8
            JSONText.appendQuoted(title, to: &out)
        }
        out += #","m":"#.utf8
        JSONText.appendQuoted(message, to: &out)
        out.append(UInt8(ascii: "}"))
        return out
    }

    /// What a push can show at most: APNs takes 4096 bytes of payload, so no field needs more than that, and a
    /// monitor name or title that long would leave no room for anything else anyway.
    public static let messageLimit = 4096
    public static let nameLimit = 512

    /// The event as it is stored (issue 13: a job keeps what the push needs, not up to 64 KiB of request body):
    /// the message cut to `messageLimit` bytes, names and titles to `nameLimit`, each at a character boundary and
    /// marked with `…` where cut. The push is cut again to fit at send time, so nothing visible is lost.
    public var boundedForStorage: AlertEvent {
        var bounded = self
        bounded.message = Self.cut(message, Self.messageLimit)
        bounded.monitorName = Self.cut(monitorName, Self.nameLimit)
        bounded.title = Self.cut(title, Self.nameLimit)
        return bounded
    }

    private static func cut(_ text: String, _ limit: Int) -> String {
        text.utf8.count <= limit ? text : TextCut.prefix(text, maxBytes: limit - 3) + "…"
    }

    /// Reads a job payload written by `jobPayload`; nil if it is not one. The form `jobPayload` writes is read
    /// directly (`JobPayloadReader`); anything else goes through the JSON parser.
    public init?(jobPayload: [UInt8]) {
        if let event = JobPayloadReader.read(jobPayload) {
            self = event
            return
        }
        guard let object = try? JSONParser.parse(jobPayload), let kind = object["k"]?.stringValue.flatMap(Kind.init(rawValue:)) else {
            return nil
        }
        self.init(
            kind: kind, status: object["s"]?.intValue.flatMap(Status.init(rawValue:)),
            important: object["i"]?.boolValue ?? true, monitorID: object["id"]?.intValue,
            monitorName: object["n"]?.stringValue ?? "", title: object["t"]?.stringValue ?? "",
            message: object["m"]?.stringValue ?? "")
    }
}
