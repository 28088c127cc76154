import Common
import Foundation
import Queue
import TestSupport
import Testing

/// A claim of many jobs is a multi-row UPDATE inside a transaction. As `UPDATE` it made SQLite keep a statement journal
/// of the pages it changes (copies of the claimed jobs, notification content included), and past SQLite's 64 KiB that
/// journal went to a temporary file, created and unlinked in the temporary directory on every claim batch; as
/// `UPDATE OR FAIL` it needs none. The same holds for the other statements that change a batch of jobs. These tests
/// run the probe with SQLite's temporary files on disk (`PROBE_TEMP_STORE=file`): the relay's writer keeps them in
/// memory (`temp_store = MEMORY`), which would hide a statement journal. RETURNING's rows are the exception: they
/// stay in memory only thanks to that setting, so their test runs the probe as the relay is.
@Suite struct StatementJournalTests {
    @Test func aClaimOfAThousandJobsWritesNoTemporaryFile() throws {
        let db = try thousandDevicesWithAJob()
        let output = try probeWritingNoTemporaryFile(["drain", db.location, "w1", "1000", "0"], temporaryFilesOnDisk: true)
        #expect(output.lines.count { $0.hasPrefix("claimed ") } == 1000)
    }

    /// RETURNING's rows wait in a temporary table until the statement ends: past SQLite's 2 MiB temporary cache (a
    /// thousand jobs of 4 KiB, each near what a stored push can hold) it went to a temporary file.
    @Test func aClaimOfAThousandLargeJobsWritesNoTemporaryFile() throws {
        let db = try thousandDevicesWithAJob(ofBytes: 4096)
        let output = try probeWritingNoTemporaryFile(["drain", db.location, "w1", "1000", "0"])
        #expect(output.lines.count { $0.hasPrefix("claimed ") } == 1000)
    }

    /// The rescue of a crashed deliverer's leases is the other statement that changes up to a batch of jobs at once.
    @Test func rescuingAThousandExpiredLeasesWritesNoTemporaryFile() throws {
        let db = try thousandDevicesWithAJob()
        // Leased at t0 for a second: long expired by the probe's clock.
        #expect(try db.claim(limit: 1000, lease: .seconds(1)).count == 1000)
        #expect(try probeWritingNoTemporaryFile(["rescue", db.location], temporaryFilesOnDisk: true).lines == ["rescued 1000"])
    }

    /// After an outage, the first answer that is not one makes every retrying push due at once: a whole backlog.
    @Test func makingAThousandRetriesDueWritesNoTemporaryFile() throws {
        let db = try thousandDevicesWithAJob()
        // Backed off far past the probe's clock.
        let retryAt = TestDatabase.t0 + 10 * 365 * 86_400_000
        let claimed = try db.claim(limit: 1000)
        _ = try db.store.finish(claimed.map { JobOutcome.retry($0, at: retryAt) }, worker: "w1", now: TestDatabase.t0)
        #expect(try probeWritingNoTemporaryFile(["retry-due", db.location], temporaryFilesOnDisk: true).lines == ["made due 1000"])
    }

    /// A deliverer starting takes back its dead predecessor's leases: up to its DELIVER_CONCURRENCY.
    @Test func takingBackAThousandLeasesWritesNoTemporaryFile() throws {
        let db = try thousandDevicesWithAJob()
        #expect(try db.claim("gone", limit: 1000, lease: .seconds(3600)).count == 1000)
        #expect(try probeWritingNoTemporaryFile(["take-back", db.location, "gone"], temporaryFilesOnDisk: true).lines == ["taken back 1000"])
    }

    /// Runs QueueProbe with `arguments` in a process of its own, with SQLITE_TMPDIR at a fresh directory (SQLite reads
    /// it once a process), and expects it to succeed without touching that directory: a file created and unlinked
    /// there moves the directory's modification time. `temporaryFilesOnDisk`: without the writer's
    /// `temp_store = MEMORY`.
    private func probeWritingNoTemporaryFile(_ arguments: [String], temporaryFilesOnDisk: Bool = false) throws -> (lines: [String], status: Int32) {
        let temporary = TemporaryDirectory()
        let untouched = try modificationTime(temporary.url.path)
        var environment = ["SQLITE_TMPDIR": temporary.url.path]
        if temporaryFilesOnDisk { environment["PROBE_TEMP_STORE"] = "file" }
        let output = try ChildProcess("QueueProbe", arguments, environment: environment).readToEnd()
        #expect(output.status == 0)
        #expect(try modificationTime(temporary.url.path) == untouched, "SQLite wrote a temporary file")
        return output
    }

    /// 1,000 devices, each with one job of 1 KiB: a batch's pages well past SQLite's 64 KiB, its payloads under its
    /// 2 MiB temporary cache.
    private func thousandDevicesWithAJob(ofBytes size: Int = 1024) throws -> TestDatabase {
        let db = try TestDatabase()
        let payload = Array(repeating: UInt8(ascii: "x"), count: size)
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
