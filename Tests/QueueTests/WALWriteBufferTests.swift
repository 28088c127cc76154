import CSQLite
import CSQLiteWALBuffer
import Foundation
import SQLiteDriver
import TestSupport
import Testing

/// The connections' VFS (`kumapush-wal`, Sources/CSQLiteWALBuffer) gathers the WAL frames a COMMIT writes in memory
/// and writes them to the -wal file in one call when the commit frame is complete. Real SQLite files.
@Suite struct WALWriteBufferTests {
    /// One WAL frame: a page plus its 24-byte header (4 KiB pages, SQLite's default).
    static let frameBytes = 4_096 + 24

    /// SQLite writes each frame in two calls (header, then page): without the VFS, 20 frames were 40 write calls.
    @Test func aCommitOfTwentyFramesIsOneWriteCall() throws {
        let directory = TemporaryDirectory()
        let path = directory.path("queue.db")
        let connection = try SQLiteConnection(path: path, options: .init())
        try connection.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body BLOB NOT NULL)")
        let walBefore = try Self.size(path + "-wal")
        let writesBefore = try Self.writeCallsOfThisThread()
        try connection.writeTransaction {
            for _ in 1...20 { _ = try connection.statement("INSERT INTO notes (body) VALUES (randomblob(3000))").run() }
        }
        let writes = try Self.writeCallsOfThisThread() - writesBefore
        let frames = (try Self.size(path + "-wal") - walBefore) / Self.frameBytes
        #expect(frames >= 20, "the transaction wrote \(frames) frames")
        #expect(writes == 1, "\(writes) write calls for \(frames) frames")
    }

    enum Shape: String, CaseIterable, CustomTestStringConvertible {
        /// One page changed: the commit frame is the transaction's only frame.
        case oneFrame
        /// Ten pages of new rows.
        case tenFrames
        /// Forty pages of new rows: more than one write holds (31 frames), so the run goes out part way and goes on.
        case fortyFrames
        /// More pages than the cache holds, each changed again after SQLite wrote it to the WAL: the frames are
        /// rewritten in place and their checksums written again at the commit (the commit frame's header last).
        case spilledAndRewritten

        var testDescription: String { rawValue }
    }

    /// What a crash right after COMMIT leaves: the files as they are (a process that dies leaves what it wrote in the
    /// page cache), opened afresh, so SQLite recovers the WAL from the frames and their checksums alone. Every
    /// transaction is there, whole: nothing of a commit may still be waiting in memory when COMMIT returns.
    @Test(arguments: Shape.allCases)
    func everyCommitIsInTheFilesWhenCommitReturns(_ shape: Shape) throws {
        let directory = TemporaryDirectory()
        let path = directory.path("queue.db")
        let connection = try SQLiteConnection(path: path, options: .init())
        try connection.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body BLOB NOT NULL, mark INTEGER NOT NULL)")
        try connection.execute("INSERT INTO notes (body, mark) VALUES (x'00', 0)")
        // Ten pages: the spilled transaction's forty pages of rows cannot stay in it.
        if shape == .spilledAndRewritten { try connection.execute("PRAGMA cache_size = 10") }
        var expected = (rows: 1, marks: 0)
        for round in 1...5 {
            try connection.writeTransaction {
                switch shape {
                case .oneFrame:
                    _ = try connection.statement("UPDATE notes SET mark = mark + 1 WHERE id = 1").run()
                    expected.marks += 1
                case .tenFrames:
                    for _ in 1...10 { _ = try connection.statement("INSERT INTO notes (body, mark) VALUES (randomblob(3000), 1)").run() }
                    expected = (expected.rows + 10, expected.marks + 10)
                case .fortyFrames:
                    for _ in 1...40 { _ = try connection.statement("INSERT INTO notes (body, mark) VALUES (randomblob(3000), 1)").run() }
                    expected = (expected.rows + 40, expected.marks + 40)
                case .spilledAndRewritten:
                    for _ in 1...40 { _ = try connection.statement("INSERT INTO notes (body, mark) VALUES (randomblob(3000), 0)").run() }
                    _ = try connection.statement("UPDATE notes SET mark = mark + 1").run()
                    expected = (expected.rows + 40, expected.marks + expected.rows + 40)
                }
            }
            let crashed = directory.path("crashed-\(round).db")
            try Self.copyAsACrashLeavesIt(path, to: crashed)
            let recovered = try SQLiteConnection(path: crashed, options: .init())
            let found = try recovered.statement("SELECT count(*), sum(mark) FROM notes").rows { ($0.int(0), $0.int(1)) }.first
            #expect(found?.0 == expected.rows && found?.1 == expected.marks, "after commit \(round): \(String(describing: found))")
            #expect(try recovered.pragma("integrity_check") == "ok")
        }
    }

    /// A transaction that spilled frames into the WAL and then rolled back leaves them beyond the last commit, where
    /// the next writer's frames go. Were they held in memory, a later write of the same connection would put them
    /// over what another connection committed meanwhile.
    @Test func framesOfARolledBackTransactionNeverOverwriteAnotherConnectionsCommit() throws {
        struct Abandoned: Error {}
        let directory = TemporaryDirectory()
        let path = directory.path("queue.db")
        let spiller = try SQLiteConnection(path: path, options: .init())
        let other = try SQLiteConnection(path: path, options: .init())
        try spiller.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body BLOB NOT NULL, mark INTEGER NOT NULL)")
        try spiller.execute("INSERT INTO notes (body, mark) VALUES (x'00', 1)")
        // Everything in the database file and the WAL empty: undoing the spill reloads pages from the database file,
        // so nothing reads the WAL (which writes held frames out) before the other connection commits.
        try spiller.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        try spiller.execute("PRAGMA cache_size = 10")
        #expect(throws: Abandoned.self) {
            try spiller.writeTransaction {
                for _ in 1...15 { _ = try spiller.statement("INSERT INTO notes (body, mark) VALUES (randomblob(3000), 100)").run() }
                throw Abandoned()
            }
        }
        try other.writeTransaction {
            for _ in 1...5 { _ = try other.statement("INSERT INTO notes (body, mark) VALUES (randomblob(3000), 10)").run() }
        }
        try spiller.writeTransaction { _ = try spiller.statement("UPDATE notes SET mark = 2 WHERE id = 1").run() }
        let crashed = directory.path("crashed.db")
        try Self.copyAsACrashLeavesIt(path, to: crashed)
        for connection in [other, try SQLiteConnection(path: crashed, options: .init())] {
            let found = try connection.statement("SELECT count(*), sum(mark) FROM notes").rows { ($0.int(0), $0.int(1)) }.first
            #expect(found?.0 == 6 && found?.1 == 52, "\(String(describing: found))")
            #expect(try connection.pragma("integrity_check") == "ok")
        }
    }

    /// With `synchronous = FULL` and power-safe overwrite off (`psow=0`, the database's URI), SQLite repeats the commit
    /// frame up to the next 4 KiB sector and splits the write that crosses it around a sync; those frames are
    /// published with the commit: another connection reads the page from the last of them. So they are in the file
    /// when COMMIT returns: a reader reads every row then, before `endCommit`, and the files copied then recover whole.
    /// Commits of one frame and of several. Opened here with SQLite's own calls, since `SQLiteConnection` takes a file
    /// path.
    @Test func theFramesAFullSyncCommitPadsWithReachTheFile() throws {
        #expect(CSQLiteWALBuffer_register() == SQLITE_OK)
        let directory = TemporaryDirectory()
        let path = directory.path("queue.db")
        var db: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_URI
        #expect(sqlite3_open_v2("file:\(path)?psow=0", &db, flags, CSQLiteWALBuffer_name) == SQLITE_OK)
        defer { sqlite3_close_v2(db) }
        func execute(_ sql: String) { #expect(sqlite3_exec(db, sql, nil, nil, nil) == SQLITE_OK, "\(sql)") }
        execute("PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL")
        execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body BLOB NOT NULL, mark INTEGER NOT NULL DEFAULT 0)")
        execute("INSERT INTO notes (body) VALUES (x'00')")
        let reader = try SQLiteConnection(path: path, options: .init())
        var rows = 1
        for round in 1...6 {
            execute("BEGIN IMMEDIATE")
            if round.isMultiple(of: 2) {
                execute("UPDATE notes SET mark = mark + 1 WHERE id = 1")  // one frame
            } else {
                for _ in 1...round { execute("INSERT INTO notes (body) VALUES (randomblob(3000))") }
                rows += round
            }
            CSQLiteWALBuffer_beginCommit(db)
            let committed = sqlite3_exec(db, "COMMIT", nil, nil, nil)
            #expect(committed == SQLITE_OK)
            let read = try reader.statement("SELECT count(*), sum(mark) FROM notes").rows { ($0.int(0), $0.int(1)) }.first
            #expect(read?.0 == rows && read?.1 == round / 2, "read after commit \(round): \(String(describing: read))")
            #expect(try reader.pragma("integrity_check") == "ok")
            let crashed = directory.path("crashed-\(round).db")
            try Self.copyAsACrashLeavesIt(path, to: crashed)
            #expect(CSQLiteWALBuffer_endCommit(db, committed == SQLITE_OK ? 1 : 0) == SQLITE_OK)
            let recovered = try SQLiteConnection(path: crashed, options: .init())
            let found = try recovered.statement("SELECT count(*), sum(mark) FROM notes").rows { ($0.int(0), $0.int(1)) }.first
            #expect(found?.0 == rows && found?.1 == round / 2, "after commit \(round): \(String(describing: found))")
            #expect(try recovered.pragma("integrity_check") == "ok")
        }
    }

    /// The database and its WAL as they are, without the shared memory: opened, SQLite recovers from the WAL alone.
    static func copyAsACrashLeavesIt(_ path: String, to copy: String) throws {
        try FileManager.default.copyItem(atPath: path, toPath: copy)
        try FileManager.default.copyItem(atPath: path + "-wal", toPath: copy + "-wal")
    }

    static func size(_ path: String) throws -> Int {
        (try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
    }

    /// `write`-family system calls this thread has made (`syscw` in /proc/thread-self/io): tests running meanwhile on
    /// other threads do not count.
    static func writeCallsOfThisThread() throws -> Int {
        let io = try String(contentsOfFile: "/proc/thread-self/io", encoding: .utf8)
        let line = io.split(separator: "\n").first { $0.hasPrefix("syscw:") }
        return Int(line?.split(separator: " ").last ?? "") ?? -1
    }
}
