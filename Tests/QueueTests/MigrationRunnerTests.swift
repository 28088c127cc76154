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
        try MigrationRunner(migrations: Self.migrations, dialect: dialect).run(now: 5, logger: logger)
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

    @Test func upToStopsAtAnOlderVersion() throws {
        let dialect = MemoryDialect()
        try MigrationRunner(migrations: Self.migrations, dialect: dialect).run(now: 5, upTo: 2)
        #expect(dialect.applied.keys.sorted() == [1, 2])
    }

    @Test func aDatabaseFromANewerBinaryIsRefusedUntouched() throws {
        let dialect = MemoryDialect(applied: [1, 2, 4, 5])
        let error = #expect(throws: StoreError.self) { try MigrationRunner(migrations: Self.migrations, dialect: dialect).run(now: 5) }
        #expect(error?.code == .newerSchema)
        #expect(!dialect.log.contains { $0.hasPrefix("sql") })
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
        #expect(lines.all.first?.contains("upgrading the database schema; its locks are waited for without a time limit") == true)
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

    func execute(_ sql: String) { log.append(sql) }

    func record(_ migration: Migration, now: Int64) { applied[migration.version] = now }
}
