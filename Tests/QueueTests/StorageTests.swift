import Common
import Foundation
import Queue
import TestSupport
import Testing

@Suite struct StorageTests {
    @Test func connectionsUseWALForeignKeysAndSecureDelete() throws {
        let db = try TestDatabase()
        #expect(try db.sqlite.pragma("journal_mode") == "wal")
        #expect(try db.sqlite.pragma("foreign_keys") == "1")
        #expect(try db.sqlite.pragma("secure_delete") == "1")
        #expect(try db.sqlite.pragma("synchronous") == "1", "NORMAL by default")
        let full = try SQLiteStore(path: db.directory.path("full.db"), options: .init(synchronousFull: true), now: 0)
        #expect(try full.pragma("synchronous") == "2")
    }

    /// Finished jobs are overwritten on disk, not just unlinked: after delivery and a checkpoint, the notification
    /// text is nowhere in the database or its WAL.
    @Test func deliveredContentIsOverwrittenOnDisk() throws {
        let db = try TestDatabase()
        let a = try db.device(1)
        let marker = "MonitorNameThatMustNotSurvive-\(UUID().uuidString)"
        try db.enqueue(a, marker)
        #expect(try fileContents(db.path, containing: marker), "the test must see the marker before it is deleted")
        let job = try #require(try db.store.claim(worker: "w", limit: 1, now: TestDatabase.t0, lease: .seconds(60)).first)
        _ = try db.store.finish([.delivered(job)], worker: "w", now: TestDatabase.t0)
        try db.sqlite.checkpoint()
        #expect(try !fileContents(db.path, containing: marker))
    }

    private func fileContents(_ path: String, containing marker: String) throws -> Bool {
        let needle = Data(marker.utf8)
        for file in [path, path + "-wal"] where FileManager.default.fileExists(atPath: file) {
            if try Data(contentsOf: URL(fileURLWithPath: file)).range(of: needle) != nil { return true }
        }
        return false
    }

    @Test(arguments: StoreKind.allCases) func migrationsApplyOnceAndAreRecorded(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        _ = try kind.open(db.location, now: TestDatabase.t0 + 1)
        _ = try kind.open(db.location, now: TestDatabase.t0 + 2)
        let rows = try kind.rawQuery(db.location, "SELECT version, applied_at FROM schema_migrations ORDER BY version")
        #expect(rows.map { Int($0[0]) } == kind.migrationVersions)
        #expect(rows.allSatisfy { $0[1] == String(TestDatabase.t0) }, "applied by the first open only")
    }

    /// Several processes starting together on an empty database: one migrates, the others wait for it and find
    /// nothing left to do (SQLite: the write lock; PostgreSQL: an advisory lock).
    @Test(arguments: StoreKind.allCases) func storesOpenedTogetherMigrateOnce(_ kind: StoreKind) async throws {
        let directory = TemporaryDirectory()
        let location = try kind.freshLocation(in: directory)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for offset in 1...4 {
                group.addTask { _ = try kind.open(location, now: TestDatabase.t0 + Int64(offset)) }
            }
            try await group.waitForAll()
        }
        let versions = try kind.rawQuery(location, "SELECT version FROM schema_migrations ORDER BY version").map { $0[0] }
        #expect(versions.map { Int($0) } == kind.migrationVersions)
    }

    @Test(arguments: StoreKind.allCases) func aDatabaseMigratedByANewerBinaryIsRefused(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        try kind.rawQuery(
            db.location, "INSERT INTO schema_migrations (version, name, applied_at) VALUES (\(SQLiteStore.schemaVersion + 1), 'future', 0)")
        let error = #expect(throws: StoreError.self) { _ = try kind.open(db.location, now: 0) }
        #expect(error?.code == .newerSchema)
        #expect(error?.message.contains("newer") == true)
    }

    /// A process of the release before restarting during a rolling upgrade (SPEC §4): the newer release's migration
    /// said in the ledger that this binary's schema keeps working, so the store opens and does its work.
    @Test(arguments: StoreKind.allCases) func aNewerSchemaThatKeepsThisBinaryWorkingOpensAndWorks(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let current = try #require(kind.migrationVersions.max())
        try db.enqueue(try db.device(1), "queued before the newer release migrated")
        try kind.rawQuery(
            db.location,
            "INSERT INTO schema_migrations (version, name, applied_at, keeps_working_from) VALUES (\(current + 1), 'future', 0, \(current))")
        let store = try kind.open(db.location, now: TestDatabase.t0)
        let claimed = try store.claim(worker: "older", limit: 10, now: TestDatabase.t0, lease: .seconds(60))
        #expect(claimed.count == 1)
        _ = try store.finish(claimed.map { JobOutcome($0, kind: .delivered) }, worker: "older", now: TestDatabase.t0)
        #expect(try kind.rawQuery(db.location, "SELECT count(*) FROM jobs") == [["0"]])
    }

    /// What each shipped migration says of older binaries is in the ledger, and a ledger an older release made,
    /// without that column, gets it when this release opens the database (older releases insert by column list).
    @Test(arguments: StoreKind.allCases) func theLedgerRecordsWhichOlderBinariesEachMigrationKeepsWorking(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let recorded = "SELECT version, keeps_working_from FROM schema_migrations WHERE keeps_working_from IS NOT NULL ORDER BY version"
        let previousRelease = kind == .sqlite ? "12" : "11"
        #expect(try kind.rawQuery(db.location, recorded) == [["13", previousRelease], ["14", previousRelease]])
        try kind.rawQuery(db.location, "ALTER TABLE schema_migrations DROP COLUMN keeps_working_from")
        _ = try kind.open(db.location, now: TestDatabase.t0)
        #expect(try kind.rawQuery(db.location, recorded) == [])
        #expect(
            try kind.rawQuery(db.location, "SELECT count(*) FROM schema_migrations WHERE keeps_working_from IS NULL") == [
                [String(kind.migrationVersions.count)]
            ])
    }

    @Test(arguments: StoreKind.allCases) func aForeignDatabaseIsRefused(_ kind: StoreKind) throws {
        let directory = TemporaryDirectory()
        let location = try kind.freshLocation(in: directory)
        try kind.rawQuery(location, "CREATE TABLE customers (id INTEGER PRIMARY KEY)")
        let error = #expect(throws: StoreError.self) { _ = try kind.open(location, now: 0) }
        #expect(error?.code == .notADatabase)
    }

    @Test func aFileThatIsNotADatabaseIsRefused() throws {
        let directory = TemporaryDirectory()
        let path = directory.path("garbage.db")
        try Data(repeating: 0x42, count: 8192).write(to: URL(fileURLWithPath: path))
        let error = #expect(throws: StoreError.self) { _ = try SQLiteStore(path: path, now: 0) }
        #expect(error?.code == .notADatabase)
    }

    @Test func theDatabaseFolderIsCreated() throws {
        let directory = TemporaryDirectory()
        let path = directory.path("nested/deeper/relay.db")
        _ = try SQLiteStore(path: path, now: 0)
        #expect(FileManager.default.fileExists(atPath: path))
    }
}
