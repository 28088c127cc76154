import Synchronization

/// Log lines a test's `LogSink` received, from whichever thread logged them, for assertions about what is (never)
/// logged.
public final class LogCapture: Sendable {
    private let lines = Mutex<[String]>([])
    public init() {}
    public func append(_ line: String) { lines.withLock { $0.append(line) } }
    public var all: [String] { lines.withLock { $0 } }
    public var text: String { all.joined(separator: "\n") }
}
