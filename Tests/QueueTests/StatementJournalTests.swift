import Common
import Foundation
import Queue
import TestSupport
import Testing

/// A claim of many jobs is a multi-row UPDATE inside a transaction. As `UPDATE` it made SQLite keep a statement journal
/// of the pages it changes (copies of the claimed jobs, notification content included), and past SQLite's 64 KiB that
/// journal went to a temporary file, created and unlinked in the temporary directory on every claim batch; as
/// `UPDATE OR FAIL` it needs none. (RETURNING's rows still spill once a batch's payloads pass SQLite's 2 MiB
/// temporary cache, which the 1 KiB payloads here do not.)
@Suite struct StatementJournalTests {
    @Test func aClaimOfAThousandJobsWritesNoTemporaryFile() throws {
        let db = try thousandDevicesWithAJobOfOneKiB()

        // A process of its own: SQLite reads SQLITE_TMPDIR once a process. A file created and unlinked there moves the
        // directory's modification time.
        let temporary = TemporaryDirectory()
        let untouched = try modificationTime(temporary.url.path)
        let probe = try ChildProcess("QueueProbe", ["drain", db.location, "w1", "1000", "0"], environment: ["SQLITE_TMPDIR": temporary.url.path])
        let output = try probe.readToEnd()
        #expect(output.status == 0)
        #expect(output.lines.count { $0.hasPrefix("claimed ") } == 1000)
        #expect(try modificationTime(temporary.url.path) == untouched, "SQLite wrote a temporary file")
    }

    /// The rescue of a crashed deliverer's leases is the other statement that changes up to a batch of jobs at once.
    @Test func rescuingAThousandExpiredLeasesWritesNoTemporaryFile() throws {
        let db = try thousandDevicesWithAJobOfOneKiB()
        // Leased at t0 for a second: long expired by the probe's clock.
        #expect(try db.claim(limit: 1000, lease: .seconds(1)).count == 1000)

        let temporary = TemporaryDirectory()
        let untouched = try modificationTime(temporary.url.path)
        let probe = try ChildProcess("QueueProbe", ["rescue", db.location], environment: ["SQLITE_TMPDIR": temporary.url.path])
        let output = try probe.readToEnd()
        #expect(output.status == 0 && output.lines == ["rescued 1000"])
        #expect(try modificationTime(temporary.url.path) == untouched, "SQLite wrote a temporary file")
    }

    /// 1,000 devices, each with one job of 1 KiB: a batch's pages well past SQLite's 64 KiB, its payloads under its
    /// 2 MiB temporary cache.
    private func thousandDevicesWithAJobOfOneKiB() throws -> TestDatabase {
        let db = try TestDatabase()
        let payload = Array(repeating: UInt8(ascii: "x"), count: 1024)
        var jobs: [NewJob] = []
        for seed in 1...1000 { jobs.append(NewJob(deviceID: try db.device(seed), publicID: UUID().uuidString, payload: payload)) }
        _ = try db.store.enqueue(jobs, now: TestDatabase.t0, ttl: .seconds(3600))
        return db
    }

    /// Seconds and nanoseconds.
    private func modificationTime(_ path: String) throws -> [Int] {
        var status = stat()
        guard stat(path, &status) == 0 else { throw CocoaError(.fileReadNoSuchFile) }
        return [status.st_mtim.tv_sec, status.st_mtim.tv_nsec]
    }
}
