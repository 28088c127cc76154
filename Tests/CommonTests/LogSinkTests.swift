import Common
import Dispatch
import Foundation
import Synchronization
import Testing

/// Issue 13: a broken stderr must not crash the process, and a stalled one must not stall the threads that log.
@Suite struct LogSinkTests {
    /// A pipe whose read end is closed: every write fails with EPIPE (SIGPIPE is ignored, as the relay does).
    @Test func aBrokenDestinationDropsAndCountsLinesInsteadOfCrashing() throws {
        signal(SIGPIPE, SIG_IGN)
        var ends: [Int32] = [0, 0]
        #expect(pipe(&ends) == 0)
        close(ends[0])
        defer { close(ends[1]) }
        let logger = Logger(label: "test", sink: .fileDescriptor(ends[1], format: .text))
        let before = LogSink.droppedLines
        for index in 0..<100 { logger.info("line", ["n": String(index)]) }
        try waitUntil { LogSink.droppedLines >= before + 100 }
    }

    /// A pipe nobody reads fills after 64 KiB; before, the writing thread blocked holding the sink's lock and
    /// every other thread that logged blocked behind it.
    @Test func aStalledDestinationStallsNoThreadThatLogs() throws {
        var ends: [Int32] = [0, 0]
        #expect(pipe(&ends) == 0)
        defer {
            close(ends[0])
            close(ends[1])
        }
        let logger = Logger(label: "test", sink: .fileDescriptor(ends[1], format: .text))
        let before = LogSink.droppedLines
        let finished = DispatchSemaphore(value: 0)
        for thread in 0..<4 {
            Thread {
                for index in 0..<10_000 { logger.info("a line long enough to fill the pipe quickly", ["thread": "\(thread)", "n": "\(index)"]) }
                finished.signal()
            }.start()
        }
        let deadline = DispatchTime.now() + 30
        for _ in 0..<4 { #expect(finished.wait(timeout: deadline) == .success, "logging returned although nobody reads") }
        #expect(LogSink.droppedLines > before, "what did not fit was dropped and counted")
    }

    @Test func longValuesAreCutAndControlCharactersEscaped() {
        for format in [Settings.LogFormat.text, .json] {
            let lines = Mutex<[String]>([])
            let logger = Logger(label: "t", sink: LogSink(format: format) { line in lines.withLock { $0.append(line) } })
            logger.info("m", ["error": String(repeating: "x", count: 10_000), "method": "A\u{1b}[31m\nB"])
            let line = lines.withLock { $0.first } ?? ""
            #expect(line.utf8.count < 400, "\(format)")
            #expect(line.contains("…"))
            #expect(!line.contains("\u{1b}") && !line.contains("\n"))
        }
    }

    private func waitUntil(_ condition: () -> Bool) throws {
        let deadline = ContinuousClock.now + .seconds(10)
        while !condition() {
            guard ContinuousClock.now < deadline else {
                Issue.record("condition not met within 10 s")
                return
            }
            Thread.sleep(forTimeInterval: 0.01)
        }
    }
}
