import Foundation
import Synchronization

/// A small structured logger with the shape of swift-log's (label, level, metadata), so swapping later is
/// mechanical. Messages are fixed strings; data goes into dotted metadata keys (`job.id`, `http.status`).
///
/// Never pass notification content, full device tokens, auth tokens or key material as metadata: use
/// `Redact.token(_:)` for a device token.
public struct Logger: Sendable {
    public let label: String
    public var level: LogLevel
    public var metadata: [String: String]
    private let sink: LogSink

    public init(label: String, level: LogLevel = .info, sink: LogSink = .standardError(format: .text)) {
        self.label = label
        self.level = level
        self.metadata = [:]
        self.sink = sink
    }

    /// The logger of a process: level and line format from LOG_LEVEL and LOG_FORMAT, lines on stderr.
    public init(label: String, settings: Settings) {
        self.init(label: label, level: settings.logLevel, sink: .standardError(format: settings.logFormat))
    }

    /// A logger for a part of the program that shares this one's level, metadata and destination.
    public func child(label: String, metadata extra: [String: String] = [:]) -> Logger {
        var child = Logger(label: label, level: level, sink: sink)
        child.metadata = metadata.merging(extra) { _, new in new }
        return child
    }

    /// Whether a line at `level` would be written (to skip building costly metadata on hot paths).
    public func isEnabled(_ level: LogLevel) -> Bool { level >= self.level }

    public func log(_ level: LogLevel, _ message: @autoclosure () -> String, _ extra: [String: String] = [:]) {
        guard level >= self.level else { return }
        let merged = extra.isEmpty ? metadata : metadata.merging(extra) { _, new in new }
        sink.write(LogRecord(date: Date(), level: level, label: label, message: message(), metadata: merged))
    }

    public func trace(_ message: @autoclosure () -> String, _ extra: [String: String] = [:]) { log(.trace, message(), extra) }
    public func debug(_ message: @autoclosure () -> String, _ extra: [String: String] = [:]) { log(.debug, message(), extra) }
    public func info(_ message: @autoclosure () -> String, _ extra: [String: String] = [:]) { log(.info, message(), extra) }
    public func warning(_ message: @autoclosure () -> String, _ extra: [String: String] = [:]) { log(.warning, message(), extra) }
    public func error(_ message: @autoclosure () -> String, _ extra: [String: String] = [:]) { log(.error, message(), extra) }
}

/// One log line before formatting.
public struct LogRecord: Sendable {
    public let date: Date
    public let level: LogLevel
    public let label: String
    public let message: String
    public let metadata: [String: String]

    /// `2026-09-20T12:00:00.123Z info  ingest: request handled http.status=202 route=/wh/:id`
    public var textLine: String {
        var line = "\(RFC3339.millisecondString(date)) \(level.name.padding(toLength: 8, withPad: " ", startingAt: 0))\(label): \(message)"
        for key in metadata.keys.sorted() {
            line += " \(key)=\(Self.quotedIfNeeded(metadata[key]!))"
        }
        return line
    }

    /// `{"ts":"…","level":"info","logger":"ingest","msg":"request handled","http.status":"202"}`
    public var jsonLine: String {
        var line = "{\"ts\":\"\(RFC3339.millisecondString(date))\",\"level\":\"\(level.name)\","
        line += "\"logger\":\(JSONText.quoted(label)),\"msg\":\(JSONText.quoted(message))"
        for key in metadata.keys.sorted() {
            line += ",\(JSONText.quoted(key)):\(JSONText.quoted(metadata[key]!))"
        }
        return line + "}"
    }

    private static func quotedIfNeeded(_ value: String) -> String {
        let plain = !value.isEmpty && value.unicodeScalars.allSatisfy { $0.value > 0x20 && $0 != "\"" && $0 != "=" && $0.value < 0x7f }
        return plain ? value : JSONText.quoted(value)
    }
}

/// Where log lines go. Writes are serialised so lines from different threads never interleave.
public final class LogSink: Sendable {
    public let format: Settings.LogFormat
    private let writer: Mutex<@Sendable (String) -> Void>

    public init(format: Settings.LogFormat, writer: @escaping @Sendable (String) -> Void) {
        self.format = format
        self.writer = Mutex(writer)
    }

    /// Lines on standard error, the destination SPEC §6 promises.
    public static func standardError(format: Settings.LogFormat) -> LogSink {
        LogSink(format: format) { line in
            FileHandle.standardError.write(Data((line + "\n").utf8))
        }
    }

    func write(_ record: LogRecord) {
        let line = format == .json ? record.jsonLine : record.textLine
        writer.withLock { $0(line) }
    }
}

/// Helpers that keep secrets and personal data out of logs.
public enum Redact {
    /// A device token shown as its first 8 characters and its length, enough to correlate, not to push.
    public static func token(_ token: String) -> String { "\(token.prefix(8))…(\(token.count))" }
}
