import Common
import Foundation
import SQLiteDriver
import Synchronization
import TestSupport
import Testing

@testable import Queue

/// An upgrade that rebuilds the queue takes seconds (migration 12: about 20 s for a million jobs): the operator sees
/// each migration announced and timed instead of a process that says nothing, and the processes started with the
/// one upgrading wait for it instead of failing at the busy timeout.
@Suite struct SchemaUpgradeTests {
    private static func capturingLogger() -> (Logger, LogCapture) {
        let lines = LogCapture()
        let logger = Logger(label: "relay", level: .info, sink: LogSink(format: .text) { line in lines.append(line) })
        return (logger, lines)
    }

    @Test func upgradingAnExistingDatabaseAnnouncesEachMigrationAndItsDuration() throws {
        let directory = TemporaryDirectory()
        let path = directory.path("relay.db")
        _ = try sqliteDatabase(atSchema: 10, path: path)
        let (logger, lines) = Self.capturingLogger()
        _ = try SQLiteStore(path: path, options: .init(logger: logger), now: TestDatabase.t0)

        let logged = lines.all
        let pending = Migrations.all.map(\.version).filter { $0 > 10 }
        #expect(!pending.isEmpty)
        #expect(logged.count == 2 * pending.count)
        for (index, version) in pending.enumerated() {
            let before = logged[2 * index]
            let after = logged[2 * index + 1]
            #expect(before.contains("upgrading the database schema") && before.contains("schema.version=\(version)"))
            #expect(after.contains("database schema upgraded") && after.contains("schema.version=\(version)"))
            #expect(after.contains("duration_ms="))
        }
    }

    @Test func aNewDatabaseIsCreatedWithoutUpgradeLines() throws {
        let directory = TemporaryDirectory()
        let (logger, lines) = Self.capturingLogger()
        _ = try SQLiteStore(path: directory.path("relay.db"), options: .init(logger: logger), now: TestDatabase.t0)
        #expect(lines.all.isEmpty)
    }

    /// Another process applies a migration after this one read the list of applied ones, and before this one took
    /// the write lock to apply it: this one checks the list again inside the lock, so it neither runs the
    /// migration a second time (at the least its `schema_migrations` row would break the primary key, and the process
    /// with it) nor announces work it did not do.
    @Test func aMigrationAnotherProcessAppliedAfterThisOneLookedIsSkippedAndNotAnnounced() throws {
        let directory = TemporaryDirectory()
        let path = directory.path("relay.db")
        let newest = try #require(Migrations.all.last)
        let other = try sqliteDatabase(atSchema: newest.version - 1, path: path)
        let connection = try SQLiteConnection(path: path, options: .init())
        let (logger, lines) = Self.capturingLogger()
        var played: [Int] = []
        try Migrations.apply(on: connection, now: TestDatabase.t0, logger: logger) { migration in
            // One line each: a migration's SQL may end in a `--` comment.
            try other.execute(
                [
                    "BEGIN IMMEDIATE;", migration.sql + ";",
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (\(migration.version), 'other', 0);", "COMMIT;"
                ]
                .joined(separator: "\n"))
            played.append(migration.version)
        }
        #expect(played == [newest.version])
        #expect(lines.all.isEmpty)
        let recorded = try connection.statement("SELECT name FROM schema_migrations WHERE version = ?")
            .rows([.integer(Int64(newest.version))]) { $0.text(0) }
        #expect(recorded == ["other"], "applied once, by the other process")
    }

    /// A process that opens the database while another upgrades it (holding the write lock, say, for 20 s) waits
    /// longer than its busy timeout, then finds the migration applied and announces nothing it did not do. Here
    /// the other process applies the newest migration with the lock held three times the opener's busy timeout.
    @Test func openingWaitsForAnotherProcessUpgradingAndDoesNotAnnounceItsWork() throws {
        let directory = TemporaryDirectory()
        let path = directory.path("relay.db")
        let newest = try #require(Migrations.all.last)
        let holder = try sqliteDatabase(atSchema: newest.version - 1, path: path)
        try holder.execute("PRAGMA journal_mode = WAL")  // as every relay database is
        try holder.execute("BEGIN IMMEDIATE")
        let (logger, lines) = Self.capturingLogger()
        let opened = OpenResult()
        let done = DispatchSemaphore(value: 0)
        let started = Mutex<ContinuousClock.Instant?>(nil)
        Thread.detachNewThread {
            started.withLock { $0 = .now }
            opened.set(
                Result { try SQLiteStore(path: path, options: .init(busyTimeout: .milliseconds(100), logger: logger), now: TestDatabase.t0) })
            done.signal()
        }
        try holder.execute(newest.sql)
        try holder.execute("INSERT INTO schema_migrations (version, name, applied_at) VALUES (\(newest.version), 'v\(newest.version)', 0)")
        // The lock held until the opener has been trying for three times its busy timeout: what is being tested.
        // A condition on when the opener began, not a sleep from here: a thread that started late found the lock free.
        let heldLongEnough = { started.withLock { $0 }.map { ContinuousClock.now - $0 > .milliseconds(300) } ?? false }
        while !heldLongEnough() { Thread.sleep(forTimeInterval: 0.01) }
        #expect(!opened.isSet, "the opener is still waiting, neither failed nor through")
        try holder.execute("COMMIT")
        done.wait()
        #expect(throws: Never.self) { try opened.get() }
        #expect(lines.all.isEmpty)
    }
}

/// The outcome of opening a store on another thread.
private final class OpenResult: Sendable {
    private let result = Mutex<Result<SQLiteStore, any Error>?>(nil)
    func set(_ value: Result<SQLiteStore, any Error>) { result.withLock { $0 = value } }
    var isSet: Bool { result.withLock { $0 != nil } }
    func get() throws -> SQLiteStore { try result.withLock { $0 }!.get() }
}
