import Common
import PostgresDriver
import TestSupport
import Testing

@testable import Queue

/// The one migration runner both stores use (issue 38), over a dialect that keeps its ledger in memory: which
/// migrations it applies, in which transactions, what it refuses, and what it announces. Then PostgreSQL's
/// announcements on a real server (SQLite's are `SchemaUpgradeTests`).
@Suite struct MigrationRunnerTests {
    static let migrations = [1, 2, 4].map { Migration(version: $0, name: "m\($0)", sql: "sql \($0)") }

    private static func capturingLogger() -> (Logger, LogCapture) {
        let lines = LogCapture()
        return (Logger(label: "relay", level: .info, sink: LogSink(format: .text) { line in lines.append(line) }), lines)
    }

    @Test func aNewDatabaseGetsEveryMigrationEachInItsOwnTransactionAndNothingIsAnnounced() throws {
        let dialect = MemoryDialect()
        let (logger, lines) = Self.capturingLogger()
        #expect(try MigrationRunner(migrations: Self.migrations, dialect: dialect).run(now: 5, logger: logger) == 4)
        #expect(dialect.log == ["begin", "ledger", "commit", "begin", "sql 1", "commit", "begin", "sql 2", "commit", "begin", "sql 4", "commit"])
        #expect(dialect.applied == [1: 5, 2: 5, 4: 5])
        #expect(lines.all.isEmpty)
    }

    @Test func anUpgradeAppliesOnlyWhatIsMissingAndAnnouncesEachWithItsDuration() throws {
        let dialect = MemoryDialect(applied: [1, 2])
        let (logger, lines) = Self.capturingLogger()
        try MigrationRunner(migrations: Self.migrations, dialect: dialect).run(now: 5, logger: logger)
        #expect(dialect.log.filter { $0.hasPrefix("sql") } == ["sql 4"])
        #expect(lines.all.count == 2)
        #expect(lines.all.first?.contains("upgrading the database schema; the note") == true)
        #expect(lines.all.first?.contains("schema.version=4") == true)
        #expect(lines.all.last?.contains("database schema upgraded") == true)
        #expect(lines.all.last?.contains("duration_ms=") == true)
    }

    /// Another process applied a migration between this one's reading the ledger and its taking the lock: the
    /// check inside the transaction skips it, and nothing is announced as this process's work.
    @Test func aMigrationAppliedMeanwhileIsSkippedAndNotAnnounced() throws {
        let dialect = MemoryDialect(applied: [1])
        let (logger, lines) = Self.capturingLogger()
        try MigrationRunner(migrations: Self.migrations, dialect: dialect).run(now: 5, logger: logger) { migration in
            if migration.version == 2 { dialect.applied[2] = 0 }
        }
        #expect(dialect.log.filter { $0.hasPrefix("sql") } == ["sql 4"])
        #expect(dialect.applied[2] == 0, "not recorded again")
        #expect(lines.all.count == 2 && lines.all.allSatisfy { $0.contains("schema.version=4") })
    }

    /// A newer release's process migrated past this one between two of its migrations (both started at once during
    /// a rolling upgrade): judged as a newer schema found at the start is, so `migrate` reports the database's
    /// version only when it keeps this binary working, and a migration that does not stops start-up here too.
    @Test(arguments: [4, nil] as [Int?])
    func aNewerReleaseMigratingMeanwhileIsJudgedAsAtTheStart(keepsWorkingFrom: Int?) throws {
        let dialect = MemoryDialect(applied: [1])
        let (logger, lines) = Self.capturingLogger()
        let runner = MigrationRunner(migrations: Self.migrations, dialect: dialect)
        let run = {
            try runner.run(now: 5, logger: logger) { migration in
                guard migration.version == 2 else { return }
                for version in [2, 4, 5] { dialect.applied[version] = 0 }
                dialect.keeps[5] = keepsWorkingFrom
            }
        }
        guard keepsWorkingFrom != nil else {
            let error = #expect(throws: StoreError.self) { try run() }
            #expect(error?.code == .newerSchema)
            #expect(error?.message.contains("migration 5 does not keep it working") == true)
            return
        }
        #expect(try run() == 5)
        #expect(!dialect.log.contains { $0.hasPrefix("sql") }, "every migration was applied by the other process")
        #expect(lines.all.last?.contains("keeps it working") == true && lines.all.last?.contains("schema.version=5") == true)
    }

    @Test func upToStopsAtAnOlderVersion() throws {
        let dialect = MemoryDialect()
        #expect(try MigrationRunner(migrations: Self.migrations, dialect: dialect).run(now: 5, upTo: 2) == 2)
        #expect(dialect.applied.keys.sorted() == [1, 2])
    }

    @Test func aDatabaseFromANewerBinaryIsRefusedUntouched() throws {
        let dialect = MemoryDialect(applied: [1, 2, 4, 5])
        let error = #expect(throws: StoreError.self) { try MigrationRunner(migrations: Self.migrations, dialect: dialect).run(now: 5) }
        #expect(error?.code == .newerSchema)
        #expect(!dialect.log.contains { $0.hasPrefix("sql") })
    }

    /// A rolling upgrade's older process restarting on the newer release's database: each migration it does not know
    /// said, in the ledger, that binaries of its schema keep working, so it starts and changes nothing.
    @Test func aNewerSchemaWhoseMigrationsKeepThisBinaryWorkingIsAcceptedUntouched() throws {
        let dialect = MemoryDialect(applied: [1, 2, 4, 5, 6])
        dialect.keeps = [5: 4, 6: 2]
        let (logger, lines) = Self.capturingLogger()
        // The version `migrate` reports: the database's, not this binary's 4.
        #expect(try MigrationRunner(migrations: Self.migrations, dialect: dialect).run(now: 5, logger: logger) == 6)
        #expect(!dialect.log.contains { $0.hasPrefix("sql") })
        #expect(dialect.applied.keys.sorted() == [1, 2, 4, 5, 6])
        #expect(lines.all.count == 1)
        #expect(lines.all.first?.contains("keeps it working") == true && lines.all.first?.contains("schema.version=6") == true)
    }

    /// One newer migration that does not keep it working (none recorded, or a version past this binary's) is enough
    /// to refuse.
    @Test(arguments: [[5: 4], [5: 4, 6: 5]])
    func aNewerSchemaWithOneMigrationThatBreaksThisBinaryIsRefused(keeps: [Int: Int]) throws {
        let dialect = MemoryDialect(applied: [1, 2, 4, 5, 6])
        dialect.keeps = keeps
        let error = #expect(throws: StoreError.self) { try MigrationRunner(migrations: Self.migrations, dialect: dialect).run(now: 5) }
        #expect(error?.code == .newerSchema)
        #expect(error?.message.contains("migration 6 does not keep it working") == true)
        #expect(!dialect.log.contains { $0.hasPrefix("sql") })
    }

    /// Newer migrations over a database that lacks one this binary has: not the schema any release left, so refused
    /// rather than guessed at.
    @Test func aNewerSchemaMissingAMigrationThisBinaryKnowsIsRefused() throws {
        let dialect = MemoryDialect(applied: [1, 4, 5])
        dialect.keeps = [5: 4]
        let error = #expect(throws: StoreError.self) { try MigrationRunner(migrations: Self.migrations, dialect: dialect).run(now: 5) }
        #expect(error?.code == .newerSchema)
        #expect(error?.message.contains("lacks migration 2") == true)
        #expect(!dialect.log.contains { $0.hasPrefix("sql") })
    }

    @Test func eachAppliedMigrationRecordsWhichOlderBinariesItKeepsWorking() throws {
        let dialect = MemoryDialect()
        let migrations = [Migration(version: 1, name: "m1", sql: "sql 1"), Migration(version: 2, name: "m2", sql: "sql 2", keepsWorkingFrom: 1)]
        try MigrationRunner(migrations: migrations, dialect: dialect).run(now: 5)
        #expect(dialect.keeps == [2: 1])
    }

    @Test func tablesWithoutALedgerAreNotARelayDatabase() throws {
        let dialect = MemoryDialect()
        dialect.tables = ["customers"]
        let error = #expect(throws: StoreError.self) { try MigrationRunner(migrations: Self.migrations, dialect: dialect).run(now: 5) }
        #expect(error?.code == .notADatabase)
        #expect(!dialect.log.contains("ledger"))
    }

    /// PostgreSQL announces each migration of an upgrade as SQLite does, with its own note on the lock waits; a new
    /// database says nothing.
    @Test func postgresAnnouncesEachMigrationOfAnUpgrade() throws {
        let location = try PostgresServer.shared().createDatabase()
        let older = try #require(PostgresMigrations.all.dropLast().last?.version)
        try PostgresMigrations.apply(on: try PGConnection(conninfo: location, options: .init()), now: TestDatabase.t0, upTo: older)
        let (logger, lines) = Self.capturingLogger()
        _ = try PostgresStore(url: location, options: .init(logger: logger), now: TestDatabase.t0)
        let newest = PostgresMigrations.latestVersion
        #expect(lines.all.count == 2)
        #expect(lines.all.first?.contains("upgrading the database schema; it waits for a table's lock at most 500 ms at a time") == true)
        #expect(lines.all.first?.contains("schema.version=\(newest)") == true)
        #expect(lines.all.last?.contains("database schema upgraded") == true && lines.all.last?.contains("duration_ms=") == true)

        let (freshLogger, freshLines) = Self.capturingLogger()
        _ = try PostgresStore(url: try PostgresServer.shared().createDatabase(), options: .init(logger: freshLogger), now: TestDatabase.t0)
        #expect(freshLines.all.isEmpty)
    }
}

/// A dialect whose database is a dictionary, logging what the runner asks of it.
private final class MemoryDialect: MigrationDialect {
    var applied: [Int: Int64]
    /// What each recorded migration said of older binaries (`Migration.keepsWorkingFrom`).
    var keeps: [Int: Int] = [:]
    var tables: [String] = []
    private(set) var log: [String] = []

    init(applied: Set<Int> = []) {
        self.applied = Dictionary(uniqueKeysWithValues: applied.map { ($0, 0) })
        if !applied.isEmpty { tables = ["schema_migrations"] }
    }

    var upgradeNote: String { "the note" }

    func transaction<T>(_ body: () throws -> T) throws -> T {
        log.append("begin")
        let result = try body()
        log.append("commit")
        return result
    }

    func tableNames() -> [String] { tables }

    func createLedger() {
        log.append("ledger")
        if !tables.contains("schema_migrations") { tables.append("schema_migrations") }
    }

    func appliedVersions() -> Set<Int> { Set(applied.keys) }

    func keptWorkingFrom() -> [Int: Int] { keeps }

    func execute(_ sql: String) { log.append(sql) }

    func record(_ migration: Migration, now: Int64) {
        applied[migration.version] = now
        keeps[migration.version] = migration.keepsWorkingFrom
    }
}
