import Foundation
import TestSupport
import Testing

@testable import Queue

/// Checkpoints off the writer's commits (`WALCheckpointer`): the thread copies the WAL into the database while the
/// writer only appends, and the WAL stays bounded when the thread falls behind. Real SQLite files.
@Suite struct WALCheckpointerTests {
    /// One WAL frame: a page plus its 24-byte header (4 KiB pages, SQLite's default).
    static let frameBytes = 4_096 + 24

    @Test func theThreadCopiesTheWALIntoTheDatabaseWithoutTheWriterCheckpointing() throws {
        let directory = TemporaryDirectory()
        let path = directory.path("wal.db")
        let writer = try Self.writer(path)
        // Inline only far beyond what this test writes: any copy into the database file is the thread's.
        let checkpointer = WALCheckpointer(
            connection: try CheckpointConnection(path: path, synchronousFull: false), backgroundFrames: 50,
            inlineFrames: 100_000)
        defer { checkpointer.stop() }
        writer.reportWALCommits(to: checkpointer)
        let before = try Self.size(path)
        try Self.commit(100, pagesEach: 1, on: writer)
        let deadline = ContinuousClock.now + .seconds(30)
        while try Self.size(path) == before, ContinuousClock.now < deadline { usleep(1_000) }
        #expect(try Self.size(path) > before, "the checkpoint thread copied the WAL into the database")
    }

    @Test func pastTheInlineSizeACommitCheckpointsItselfSoTheWALStaysBounded() throws {
        let directory = TemporaryDirectory()
        let path = directory.path("wal.db")
        let writer = try Self.writer(path)
        let checkpointer = WALCheckpointer(
            connection: try CheckpointConnection(path: path, synchronousFull: false), backgroundFrames: 1_000_000,
            inlineFrames: 40)
        checkpointer.stop()  // a thread that never keeps up
        writer.reportWALCommits(to: checkpointer)
        try Self.commit(300, pagesEach: 1, on: writer)
        // Without the inline checkpoint the WAL would hold every page written: 300 commits of two or more frames.
        let walBytes = try Self.size(path + "-wal")
        #expect(walBytes > 0)
        #expect(walBytes <= 32 + (40 + 10) * Self.frameBytes, "WAL of \(walBytes) bytes")
    }

    private static func writer(_ path: String) throws -> SQLiteConnection {
        let writer = try SQLiteConnection(path: path, options: .init())
        try writer.execute("CREATE TABLE pages (content BLOB)")
        return writer
    }

    /// `count` transactions, each inserting a row about `pagesEach` pages long.
    private static func commit(_ count: Int, pagesEach: Int, on writer: SQLiteConnection) throws {
        let row = SQLiteValue.blob([UInt8](repeating: 0x5A, count: pagesEach * 4_000))
        for _ in 0..<count {
            _ = try writer.writeTransaction { try writer.statement("INSERT INTO pages (content) VALUES (?)").run([row]) }
        }
    }

    private static func size(_ path: String) throws -> Int {
        (try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
    }
}
