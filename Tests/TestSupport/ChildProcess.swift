import Foundation

/// A helper binary started by a test, read line by line with deadlines (poll, never a fixed sleep).
public final class ChildProcess {
    public enum Failure: Error, CustomStringConvertible {
        case timedOut(String)
        case exitedEarly(String)
        public var description: String {
            switch self {
            case .timedOut(let what): return "timed out waiting for \(what)"
            case .exitedEarly(let what): return "the process ended before \(what)"
            }
        }
    }

    /// Binaries built next to the test bundle (`swift build` builds every product of the package).
    public static let buildDirectory = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent()

    public let process = Process()
    private let output = Pipe()
    private var buffer = Data()
    private var reachedEOF = false

    /// `environment`: variables set for the child on top of this process's own.
    public init(_ product: String, _ arguments: [String], environment: [String: String] = [:]) throws {
        process.executableURL = Self.buildDirectory.appendingPathComponent(product)
        process.arguments = arguments
        if !environment.isEmpty { process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 } }
        process.standardOutput = output
        try process.run()
    }

    deinit {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }

    /// The next line of standard output, waiting at most `timeout`.
    public func readLine(timeout: Duration = .seconds(30), what: String = "a line") throws -> String {
        let deadline = ContinuousClock.now + timeout
        while true {
            if let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                let line = String(decoding: buffer[buffer.startIndex..<newline], as: UTF8.self)
                buffer.removeSubrange(buffer.startIndex...newline)
                return line
            }
            if reachedEOF { throw Failure.exitedEarly(what) }
            try fill(until: deadline, what: what)
        }
    }

    /// Reads lines until one satisfies `match`, returning it.
    public func waitForLine(timeout: Duration = .seconds(30), where match: (String) -> Bool) throws -> String {
        let deadline = ContinuousClock.now + timeout
        while true {
            let line = try readLine(timeout: deadline - ContinuousClock.now, what: "the expected line")
            if match(line) { return line }
        }
    }

    /// Everything the process writes until it exits, then its exit status.
    public func readToEnd(timeout: Duration = .seconds(120)) throws -> (lines: [String], status: Int32) {
        let deadline = ContinuousClock.now + timeout
        while !reachedEOF { try fill(until: deadline, what: "the end of output") }
        process.waitUntilExit()
        let text = String(decoding: buffer, as: UTF8.self)
        buffer.removeAll()
        return (text.split(separator: "\n").map(String.init), process.terminationStatus)
    }

    /// SIGKILL: no cleanup, no flushing, exactly like a crash or the OOM killer.
    public func killHard() {
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    private func fill(until deadline: ContinuousClock.Instant, what: String) throws {
        let remaining = deadline - ContinuousClock.now
        guard remaining > .zero else { throw Failure.timedOut(what) }
        var pollDescriptor = pollfd(fd: output.fileHandleForReading.fileDescriptor, events: Int16(POLLIN), revents: 0)
        let ready = poll(&pollDescriptor, 1, Int32(clamping: remaining.wholeMillisecondsForPoll))
        guard ready > 0 else {
            if ready == 0 { throw Failure.timedOut(what) }
            return
        }
        var chunk = [UInt8](repeating: 0, count: 65_536)
        let count = read(pollDescriptor.fd, &chunk, chunk.count)
        if count <= 0 { reachedEOF = true } else { buffer.append(contentsOf: chunk[0..<count]) }
    }
}

extension Duration {
    fileprivate var wholeMillisecondsForPoll: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000 + 1
    }
}
