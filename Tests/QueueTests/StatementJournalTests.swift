import Common
import Foundation
import Queue
import TestSupport
import Testing

/// A claim of many jobs is a multi-row UPDATE inside a transaction, so SQLite keeps a statement journal of the pages
/// it changes (copies of the claimed jobs, notification content included). Past SQLite's default 64 KiB that journal
/// went to a temporary file, created and unlinked in the temporary directory on every claim batch.
@Suite struct StatementJournalTests {
    @Test func aClaimOfAThousandJobsWritesNoTemporaryFile() throws {
        let db = try TestDatabase()
        let payload = Array(repeating: UInt8(ascii: "x"), count: 1024)
        var jobs: [NewJob] = []
        for seed in 1...1000 { jobs.append(NewJob(deviceID: try db.device(seed), publicID: UUID().uuidString, payload: payload)) }
        _ = try db.store.enqueue(jobs, now: TestDatabase.t0, ttl: .seconds(3600))

        // A process of its own: SQLite takes the setting once, before its first connection opens, and reads
        // SQLITE_TMPDIR once. A file created and unlinked there moves the directory's modification time.
        let temporary = TemporaryDirectory()
        let untouched = try modificationTime(temporary.url.path)
        let probe = try ChildProcess("QueueProbe", ["drain", db.location, "w1", "1000", "0"], environment: ["SQLITE_TMPDIR": temporary.url.path])
        let output = try probe.readToEnd()
        #expect(output.status == 0)
        #expect(output.lines.count { $0.hasPrefix("claimed ") } == 1000)
        #expect(try modificationTime(temporary.url.path) == untouched, "SQLite wrote a temporary file")
    }

    /// Seconds and nanoseconds.
    private func modificationTime(_ path: String) throws -> [Int] {
        var status = stat()
        guard stat(path, &status) == 0 else { throw CocoaError(.fileReadNoSuchFile) }
        return [status.st_mtim.tv_sec, status.st_mtim.tv_nsec]
    }
}
