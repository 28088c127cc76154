/// A parsed JSON value. Objects keep their members in order; a repeated key keeps the last value on lookup.
public enum JSONValue: Sendable, Equatable {
    case object([(key: String, value: JSONValue)])
    case array([JSONValue])
    case string(String)
    /// A number as written (validated), so integers of any size survive and nothing is rounded on the way.
    case number(String)
    case bool(Bool)
    case null

    public subscript(key: String) -> JSONValue? {
        guard case .object(let members) = self else { return nil }
        return members.last { $0.key == key }?.value
    }

    public var stringValue: String? { if case .string(let text) = self { text } else { nil } }
    public var boolValue: Bool? { if case .bool(let value) = self { value } else { nil } }
    public var isNull: Bool { self == .null }
    public var isObject: Bool { if case .object = self { true } else { false } }

    /// The value as an integer when it is a number without fraction or exponent that fits in `Int`.
    public var intValue: Int? {
        guard case .number(let text) = self else { return nil }
        return Int(text)
    }

    public static func == (lhs: JSONValue, rhs: JSONValue) -> Bool {
        switch (lhs, rhs) {
        case (.object(let a), .object(let b)):
            return a.count == b.count && zip(a, b).allSatisfy { $0.key == $1.key && $0.value == $1.value }
        case (.array(let a), .array(let b)): return a == b
        case (.string(let a), .string(let b)): return a == b
        case (.number(let a), .number(let b)): return a == b
        case (.bool(let a), .bool(let b)): return a == b
        case (.null, .null): return true
        default: return false
        }
    }
}
