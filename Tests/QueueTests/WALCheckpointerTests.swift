import Foundation
import SQLiteDriver
import TestSupport
import Testing

@testable import Queue

/// Checkpoints off the writer's commits (`WALCheckpointer`): the thread copies the WAL into the database while the
/// writer only appends, and the WAL stays bounded when the thread falls behind. Real SQLite files.
@Suite struct WALCheckpointerTests {
    /// One WAL frame: a page plus its 24-byte header (4 KiB pages, SQLite's default).
    static let frameBytes = 4_096 + 24

    @Test func theThreadCopiesTheWALIntoTheDatabaseWithoutTheWriterCheckpointing() throws {
        // Inline only far beyond what this test writes: any copy into the database file is the thread's.
        let database = try Database(backgroundFrames: 50, inlineFrames: 100_000)
        defer { database.checkpointer.stop() }
        let before = try Self.size(database.path)
        try Self.commit(100, pagesEach: 1, on: database.writer)
        #expect(try Self.grows(database.path, from: before), "the checkpoint thread copied the WAL into the database")
    }

    @Test func pastTheInlineSizeACommitCheckpointsItselfSoTheWALStaysBounded() throws {
        let database = try Database(backgroundFrames: 1_000_000, inlineFrames: 40)
        database.checkpointer.stop()  // a thread that never keeps up
        try Self.commit(300, pagesEach: 1, on: database.writer)
        // Without the inline checkpoint the WAL would hold every page written: 300 commits of two or more frames.
        let walBytes = try Self.size(database.path + "-wal")
        #expect(walBytes > 0)
        #expect(walBytes <= 32 + (40 + 10) * Self.frameBytes, "WAL of \(walBytes) bytes")
    }

    @Test func withTheHookInstalledSQLitesOwnCheckpointNoLongerRunsInTheCommit() throws {
        // A thread that never runs and an inline size out of reach: past SQLite's 1,000-page automatic checkpoint,
        // nothing may copy the WAL into the database file.
        let database = try Database(backgroundFrames: 1_000_000, inlineFrames: 1_000_000)
        database.checkpointer.stop()
        let before = try Self.size(database.path)
        try Self.commit(600, pagesEach: 1, on: database.writer)
        #expect(try Self.size(database.path + "-wal") > 1_000 * Self.frameBytes, "past SQLite's automatic size")
        #expect(try Self.size(database.path) == before, "no checkpoint ran in a commit")
    }

    @Test func aCopiedCountLargerThanTheWALCountsAsNothingCopied() throws {
        // As after a restart of the WAL the writer did not see: the thread must still be woken for what is there.
        let database = try Database(backgroundFrames: 50, inlineFrames: 100_000)
        defer { database.checkpointer.stop() }
        database.checkpointer.noteCheckpointed(frames: 90_000)
        let before = try Self.size(database.path)
        try Self.commit(100, pagesEach: 1, on: database.writer)
        #expect(try Self.grows(database.path, from: before), "the checkpoint thread was woken and copied the WAL")
    }

    /// A yielding thread copies at a lower CPU priority: ten nice levels below the thread that opened the store, as
    /// the kernel reports it; one that does not yield keeps that thread's.
    @Test(
        .enabled(if: (Thread.currentNice ?? 0) <= 9, "from nice 10 up the lowered value is capped at 19"),
        arguments: [true, false])
    func aYieldingThreadRunsTenNiceLevelsBelowTheOneThatOpenedTheStore(yields: Bool) throws {
        let database = try Database(backgroundFrames: 50, inlineFrames: 100_000, yields: yields)
        defer { database.checkpointer.stop() }
        let before = try Self.size(database.path)
        try Self.commit(100, pagesEach: 1, on: database.writer)
        // It copied, so it ran, and it lowers its priority before anything else.
        #expect(try Self.grows(database.path, from: before))
        let thread = database.checkpointer.threadID.load(ordering: .acquiring)
        let stat = try String(contentsOfFile: "/proc/self/task/\(thread)/stat", encoding: .utf8)
        // Field 19 is the nice value; the fields after the name (which may hold spaces) start at field 3.
        let nice = stat[stat.range(of: ")", options: .backwards)!.upperBound...].split(separator: " ")[16]
        let opener = Thread.currentNice ?? 0
        #expect(Int32(nice) == (yields ? opener + WALCheckpointer.yieldingPriorityDrop : opener), "\(stat)")
    }

    /// A new database file, and a writer whose commits report to a checkpointer of the given sizes.
    private struct Database {
        let directory = TemporaryDirectory()
        let path: String
        let writer: SQLiteConnection
        let checkpointer: WALCheckpointer

        init(backgroundFrames: Int, inlineFrames: Int, yields: Bool = false) throws {
            path = directory.path("wal.db")
            writer = try SQLiteConnection(path: path, options: .init())
            try writer.execute("CREATE TABLE pages (content BLOB)")
            checkpointer = WALCheckpointer(
                connection: try CheckpointConnection(path: path, synchronousFull: false),
                backgroundFrames: backgroundFrames, inlineFrames: inlineFrames, yields: yields)
            writer.reportWALCommits(to: checkpointer)
        }
    }

    /// `count` transactions, each inserting a row about `pagesEach` pages long.
    private static func commit(_ count: Int, pagesEach: Int, on writer: SQLiteConnection) throws {
        let row = SQLiteValue.blob([UInt8](repeating: 0x5A, count: pagesEach * 4_000))
        for _ in 0..<count {
            _ = try writer.writeTransaction { try writer.statement("INSERT INTO pages (content) VALUES (?)").run([row]) }
        }
    }

    /// Whether the file at `path` grows past `size` bytes within 30 s (only a checkpoint grows the database file).
    private static func grows(_ path: String, from size: Int) throws -> Bool {
        let deadline = ContinuousClock.now + .seconds(30)
        while try Self.size(path) == size, ContinuousClock.now < deadline { usleep(1_000) }
        return try Self.size(path) > size
    }

    private static func size(_ path: String) throws -> Int {
        (try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
    }
}
