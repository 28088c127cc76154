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

    /// Longest metadata value written, in UTF-8 bytes; longer ones are cut and end with `…`. Values can carry
    /// outside text (an error from a library, a header), so one field never makes a line unbounded.
    public static let maxValueBytes = 256

    /// `2026-09-20T12:00:00.123Z info  ingest: request handled http.status=202 route=/wh/:id`
    public var textLine: String {
        var line = "\(RFC3339.millisecondString(date)) \(level.name.padding(toLength: 8, withPad: " ", startingAt: 0))\(label): \(message)"
        for key in metadata.keys.sorted() {
            line += " \(key)=\(Self.quotedIfNeeded(Self.cut(metadata[key]!)))"
        }
        return line
    }

    /// `{"ts":"…","level":"info","logger":"ingest","msg":"request handled","http.status":"202"}`
    public var jsonLine: String {
        var line = "{\"ts\":\"\(RFC3339.millisecondString(date))\",\"level\":\"\(level.name)\","
        line += "\"logger\":\(JSONText.quoted(label)),\"msg\":\(JSONText.quoted(message))"
        for key in metadata.keys.sorted() {
            line += ",\(JSONText.quoted(key)):\(JSONText.quoted(Self.cut(metadata[key]!)))"
        }
        return line + "}"
    }

    static func cut(_ value: String) -> String {
        guard value.utf8.count > maxValueBytes else { return value }
        var bytes = 0
        var end = value.startIndex
        for character in value {
            bytes += character.utf8.count
            if bytes > maxValueBytes - 3 { break }  // room for "…"
            end = value.index(after: end)
        }
        return String(value[..<end]) + "…"
    }

    private static func quotedIfNeeded(_ value: String) -> String {
        let plain = !value.isEmpty && value.unicodeScalars.allSatisfy { $0.value > 0x20 && $0 != "\"" && $0 != "=" && $0.value < 0x7f }
        return plain ? value : JSONText.quoted(value)
    }
}

/// Where log lines go.
///
/// A sink never holds a lock while a line is written: a stalled stderr (a full pipe nobody reads) must not stall
/// every thread that logs, and a broken one (closed, EPIPE) must not crash the process (issue 13). Standard error
/// is written by one background thread (`StandardErrorWriter`), which keeps lines whole and in order; lines it
/// cannot take are dropped and counted (`droppedLines`, `kumapush_log_lines_dropped_total`).
public final class LogSink: Sendable {
    public let format: Settings.LogFormat
    private let output: @Sendable (String) -> Void

    /// A sink calling `writer` with each line, from whichever thread logs (so `writer` must be thread-safe).
    public init(format: Settings.LogFormat, writer: @escaping @Sendable (String) -> Void) {
        self.format = format
        self.output = writer
    }

    /// Lines on standard error, the destination SPEC §6 promises.
    public static func standardError(format: Settings.LogFormat) -> LogSink {
        LogSink(format: format) { line in StandardErrorWriter.shared.enqueue(line) }
    }

    /// Lines on `descriptor` (a pipe or file the caller owns), written like standard error's: by a thread of
    /// their own, never under a lock, dropped and counted when they cannot be written.
    public static func fileDescriptor(_ descriptor: Int32, format: Settings.LogFormat) -> LogSink {
        let writer = StandardErrorWriter(descriptor: descriptor)
        return LogSink(format: format) { line in writer.enqueue(line) }
    }

    /// Lines dropped since the process started, by any sink writing to a descriptor (a full queue, or a write
    /// that failed).
    public static var droppedLines: Int { StandardErrorWriter.dropped.load(ordering: .relaxed) }
    public static let droppedLinesMetric = "kumapush_log_lines_dropped_total"

    func write(_ record: LogRecord) {
        output(format == .json ? record.jsonLine : record.textLine)
    }
}

/// Helpers that keep secrets and personal data out of logs.
public enum Redact {
    /// A device token shown as its first 8 characters and its length, enough to correlate, not to push.
    public static func token(_ token: String) -> String { "\(token.prefix(8))…(\(token.count))" }
}
