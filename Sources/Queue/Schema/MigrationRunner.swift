import Common

/// One numbered step of a store's schema. Never edit a shipped migration: add the next number.
struct Migration: Sendable {
    let version: Int
    let name: String
    let sql: String
    /// The oldest schema version whose binaries keep working on a database with this migration applied, when it only
    /// adds (an index, a column with a default) so that processes of the release before go on beside it; nil when it
    /// changes what they read or write. Written into the ledger, where a binary that does not know this migration
    /// reads it: a process of the release before that restarts during a rolling upgrade then starts instead of
    /// refusing the newer schema (SPEC §4 "Restarts and upgrades refuse nothing"). A new SQLite trigger keeps nothing
    /// working: SQLite writers from this release on fire none (`SQLiteStore.init`), so an older one would skip its work.
    var keepsWorkingFrom: Int? = nil
}

/// What a store does for the runner, in its own SQL: the schema lock, a transaction, the ledger of applied versions.
protocol MigrationDialect {
    /// Added to the line that announces each migration: what the process does while it runs.
    var upgradeNote: String { get }
    /// Runs `body` in one write transaction, holding the lock that serialises migrating processes (SQLite's write
    /// lock; PostgreSQL's advisory lock, taken in every such transaction), without the session's time limits.
    func transaction<T>(_ body: () throws -> T) throws -> T
    /// The tables already in the database (its own schema only).
    func tableNames() throws -> [String]
    /// Creates `schema_migrations` if it is not there, and adds `keeps_working_from` to a ledger made before it.
    func createLedger() throws
    func appliedVersions() throws -> Set<Int>
    /// Each applied migration's `keepsWorkingFrom`, where the ledger has one.
    func keptWorkingFrom() throws -> [Int: Int]
    /// Runs a migration's SQL: several statements, no parameters.
    func execute(_ sql: String) throws
    func record(_ migration: Migration, now: Int64) throws
}

/// Brings a database up to its store's newest migration, the same way on both stores: each missing migration in a
/// transaction of its own, checked again inside it (another process starting at the same time may have applied it
/// while this one waited for the lock), and recorded in `schema_migrations`. A database holding a version this
/// list does not know was migrated by a newer binary: this one goes on only when every such migration said, in the
/// ledger, that it keeps this binary's schema working (`Migration.keepsWorkingFrom`), and is refused otherwise. One
/// holding tables but no ledger is not a relay database and is refused too.
///
/// On a database that already had a schema (an upgrade, not a new one) each migration this process applies is
/// announced on `logger` when it starts and again with its duration when it is done: some rebuild the queue
/// (SQLite's migration 12: about 20 s a million jobs), and a process that starts silently for that long looks hung.
/// One another process applied meanwhile is not announced.
struct MigrationRunner<Dialect: MigrationDialect> {
    let migrations: [Migration]
    let dialect: Dialect

    var latestVersion: Int { migrations.map(\.version).max() ?? 0 }

    /// `upTo` stops at an older version (tests build a database as an older binary left it); `beforeEach` runs
    /// before each missing migration's transaction (tests play another process there). Returns the database's schema
    /// version when done: this binary's, or a newer release's that keeps it working.
    @discardableResult
    func run(now: Int64, upTo newest: Int? = nil, logger: Logger? = nil, beforeEach: (Migration) throws -> Void = { _ in }) throws -> Int {
        let (applied, keptWorkingFrom) = try dialect.transaction {
            let tables = try dialect.tableNames()
            if !tables.isEmpty && !tables.contains("schema_migrations") {
                throw StoreError(.notADatabase, "the database holds tables but no schema_migrations: it is not a KumaPush relay database")
            }
            try dialect.createLedger()
            return (try dialect.appliedVersions(), try dialect.keptWorkingFrom())
        }
        if let found = applied.max(), found > latestVersion {
            try acceptNewer(applied: applied, keptWorkingFrom: keptWorkingFrom, logger: logger)
            return found
        }
        let upgrading = !applied.isEmpty
        // The newest version the ledger held at its last reading here, or that this process applied.
        var newestSeen = applied.max() ?? 0
        for migration in migrations where migration.version <= newest ?? latestVersion && !applied.contains(migration.version) {
            let announced = ["schema.version": String(migration.version), "schema.migration": migration.name]
            var started: ContinuousClock.Instant?
            try beforeEach(migration)
            // The dialect may run the transaction again (PostgreSQL, after a table's lock was not had in time): the
            // migration is announced once, and its duration counts from the first attempt.
            let appliedHere = try dialect.transaction {
                let current = try dialect.appliedVersions()
                newestSeen = max(newestSeen, current.max() ?? 0, migration.version)
                guard !current.contains(migration.version) else { return false }
                if upgrading && started == nil {
                    started = ContinuousClock.now
                    logger?.info("upgrading the database schema; \(dialect.upgradeNote)", announced)
                }
                try dialect.execute(migration.sql)
                try dialect.record(migration, now: now)
                return true
            }
            if upgrading, appliedHere, let started {
                let took = ContinuousClock.now - started
                logger?.info("database schema upgraded", announced.merging(["duration_ms": String(took.wholeMilliseconds)]) { _, new in new })
            }
        }
        // A newer release migrated past this one while it ran (a rolling upgrade's processes starting together): the
        // same judgement as when it is found at the start, so a migration that breaks this binary stops it here too.
        if newestSeen > latestVersion {
            let (applied, keptWorkingFrom) = try dialect.transaction { (try dialect.appliedVersions(), try dialect.keptWorkingFrom()) }
            try acceptNewer(applied: applied, keptWorkingFrom: keptWorkingFrom, logger: logger)
            return applied.max() ?? newestSeen
        }
        return newestSeen
    }

    /// A newer binary migrated this database. This one runs beside it (a rolling upgrade) when every migration it
    /// does not know keeps its schema working and it knows of none missing; otherwise it must not touch the database.
    private func acceptNewer(applied: Set<Int>, keptWorkingFrom: [Int: Int], logger: Logger?) throws {
        let found = applied.max() ?? 0
        let unknown = applied.filter { $0 > latestVersion }.sorted()
        let missing = migrations.map(\.version).filter { !applied.contains($0) }
        if let breaking = unknown.first(where: { (keptWorkingFrom[$0] ?? Int.max) > latestVersion }) {
            throw StoreError(
                .newerSchema,
                "the database is at schema version \(found) but this binary knows only up to \(latestVersion), and migration "
                    + "\(breaking) does not keep it working: run a newer kumapush-relay")
        }
        if let gap = missing.first {
            throw StoreError(
                .newerSchema,
                "the database is at schema version \(found), newer than this binary's \(latestVersion), yet lacks migration \(gap): "
                    + "run a newer kumapush-relay")
        }
        // A warning: right during a rolling upgrade, but a host left on the older binary has not finished it.
        logger?.warning(
            "the database schema is newer than this binary's and keeps it working: running beside the newer release; finish the upgrade",
            ["schema.version": String(found), "schema.binary": String(latestVersion)])
    }
}
