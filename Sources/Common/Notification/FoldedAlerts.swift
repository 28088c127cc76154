/// Alerts folded into a device's newest waiting job once the device holds `DEVICE_QUEUE_MAX` live jobs
/// (SPEC §2.4): acknowledged and never dropped, but kept as what a digest needs — each alert's monitor and status
/// while they fit a small budget, and beyond it only counted by status. So storage per device stays bounded
/// however long a storm lasts, and every alert is still accounted for in the digest that carries them.
public struct FoldedAlerts: Sendable, Equatable {
    /// One folded alert as a digest lists it.
    public struct Entry: Sendable, Equatable {
        public var kind: AlertEvent.Kind
        public var status: AlertEvent.Status?
        public var monitorID: Int?
        /// The monitor's name, or a generic push's title, or a test's text (cut to `nameLimit`).
        public var name: String

        /// `[kind,status,id,name]`, one element of the stored list.
        var encoded: String {
            "[\"\(kind.rawValue)\",\(status.map { String($0.rawValue) } ?? "null"),"
                + "\(monitorID.map(String.init) ?? "null"),\(JSONText.quoted(name))]"
        }

        /// The entry as an event the digest builder words like any other (with no message of its own).
        public var event: AlertEvent {
            switch kind {
            case .monitor: AlertEvent(kind: .monitor, status: status, monitorID: monitorID, monitorName: name, message: "")
            case .generic: AlertEvent(kind: .generic, title: name, message: "")
            case .test: AlertEvent(kind: .test, message: name)
            }
        }
    }

    /// Alerts in order, while they fit `nameBudget`.
    public private(set) var entries: [Entry] = []
    /// Alerts folded after the budget was spent: counted by status only.
    public private(set) var uncounted = StatusTally()

    /// Stored bytes of entries kept per job: about what one push can show, so the rewrite on each fold stays small.
    static let entryBudget = 3072
    static let nameLimit = 64

    public init() {}

    public var count: Int { entries.count + uncounted.total }
    public var isEmpty: Bool { count == 0 }

    public mutating func add(_ event: AlertEvent) {
        let name: String =
            switch event.kind {
            case .monitor: event.monitorName
            case .generic: event.title.isEmpty ? event.message : event.title
            case .test: event.message
            }
        let entry = Entry(
            kind: event.kind, status: event.kind == .monitor ? event.status : nil, monitorID: event.monitorID,
            name: TextCut.prefix(name, maxBytes: Self.nameLimit))
        let usedBytes = entries.reduce(0) { $0 + $1.encoded.utf8.count + 1 }
        if uncounted.total == 0 && usedBytes + entry.encoded.utf8.count <= Self.entryBudget {
            entries.append(entry)
        } else {
            uncounted.add(event.kind == .monitor ? event.status : nil)
        }
    }

    /// Stored form: compact JSON, `{"e":[[kind,status,id,name],…],"u":[down,up,pending,maintenance,other]}`.
    public var encoded: [UInt8] {
        let list = entries.map(\.encoded)
        let tally = [uncounted.down, uncounted.up, uncounted.pending, uncounted.maintenance, uncounted.other].map(String.init)
        return Array("{\"e\":[\(list.joined(separator: ","))],\"u\":[\(tally.joined(separator: ","))]}".utf8)
    }

    /// Reads `encoded`; an empty or unreadable value is no folded alerts (the column is NULL for most jobs).
    public init(encoded bytes: [UInt8]) {
        guard !bytes.isEmpty, let object = try? JSONParser.parse(bytes) else { return }
        if case .array(let list)? = object["e"] {
            for item in list {
                guard case .array(let fields) = item, fields.count == 4,
                    let kind = fields[0].stringValue.flatMap(AlertEvent.Kind.init(rawValue:)),
                    let name = fields[3].stringValue
                else { continue }
                entries.append(
                    Entry(
                        kind: kind, status: fields[1].intValue.flatMap(AlertEvent.Status.init(rawValue:)),
                        monitorID: fields[2].intValue, name: name))
            }
        }
        if case .array(let counts)? = object["u"], counts.count == 5 {
            let values = counts.map { $0.intValue ?? 0 }
            uncounted = StatusTally(down: values[0], up: values[1], pending: values[2], maintenance: values[3], other: values[4])
        }
    }
}

/// Alerts counted by heartbeat status, for digest titles (`998 down, 2 up`).
public struct StatusTally: Sendable, Equatable {
    public var down = 0, up = 0, pending = 0, maintenance = 0
    /// Tests, generic pushes and statuses this relay does not know.
    public var other = 0

    public init(down: Int = 0, up: Int = 0, pending: Int = 0, maintenance: Int = 0, other: Int = 0) {
        (self.down, self.up, self.pending, self.maintenance, self.other) = (down, up, pending, maintenance, other)
    }

    public var total: Int { down + up + pending + maintenance + other }

    public mutating func add(_ status: AlertEvent.Status?) {
        switch status {
        case .down: down += 1
        case .up: up += 1
        case .pending: pending += 1
        case .maintenance: maintenance += 1
        case nil: other += 1
        }
    }

    public static func + (lhs: StatusTally, rhs: StatusTally) -> StatusTally {
        StatusTally(
            down: lhs.down + rhs.down, up: lhs.up + rhs.up, pending: lhs.pending + rhs.pending,
            maintenance: lhs.maintenance + rhs.maintenance, other: lhs.other + rhs.other)
    }

    /// `998 down, 2 up` (monitor states only, largest groups as Uptime Kuma names them); "" when none.
    public var summary: String {
        [(down, "down"), (up, "up"), (pending, "pending"), (maintenance, "in maintenance")]
            .filter { $0.0 > 0 }
            .map { "\(CountText.grouped($0.0)) \($0.1)" }
            .joined(separator: ", ")
    }
}

/// Counts as people read them: `1,000`.
public enum CountText {
    public static func grouped(_ value: Int) -> String {
        let digits = String(value.magnitude)
        var groups: [Substring] = []
        var end = digits.endIndex
        while end > digits.startIndex {
            let start = digits.index(end, offsetBy: -3, limitedBy: digits.startIndex) ?? digits.startIndex
            groups.insert(digits[start..<end], at: 0)
            end = start
        }
        return (value < 0 ? "-" : "") + groups.joined(separator: ",")
    }
}
