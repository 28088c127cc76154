/// Severity of a log line, in increasing order.
public enum LogLevel: Int, Sendable, Comparable, CaseIterable {
    case trace, debug, info, warning, error

    public init?(name: String) {
        switch name {
        case "trace": self = .trace
        case "debug": self = .debug
        case "info": self = .info
        case "warning", "warn": self = .warning
        case "error": self = .error
        default: return nil
        }
    }

    public var name: String {
        switch self {
        case .trace: return "trace"
        case .debug: return "debug"
        case .info: return "info"
        case .warning: return "warning"
        case .error: return "error"
        }
    }

    public static func < (lhs: LogLevel, rhs: LogLevel) -> Bool { lhs.rawValue < rhs.rawValue }
}
