import Common
import Foundation
import PostgresDriver

/// The PostgreSQL schema, as numbered, append-only migrations applied by `MigrationRunner`: the same tables, states
/// and invariants as the SQLite schema (`Migrations`), with the same version numbers, so one binary's schema version
/// means the same on both stores. Never edit a shipped migration: add the next number.
enum PostgresMigrations {
    static let all: [Migration] = [
        SharedMigrations.devicesTombstonesAndJobs(.postgres),
        SharedMigrations.reportedOutcomes(.postgres),
        SharedMigrations.foldedAlerts(.postgres),
        SharedMigrations.failedOutcomesAndPauses(
            .postgres,
            allowingFailed: """
                ALTER TABLE job_outcomes DROP CONSTRAINT job_outcomes_outcome_check;
                ALTER TABLE job_outcomes ADD CONSTRAINT job_outcomes_outcome_check
                    CHECK (outcome IN ('delivered', 'rejected', 'unregistered', 'failed'));
                """),
        SharedMigrations.monitorStates(.postgres),
        SharedMigrations.apnsEnvironment,
        Migration(
            version: 7, name: "live jobs per device, kept by triggers",
            sql: """
                -- DEVICE_QUEUE_MAX is checked on every enqueue: counting a device's jobs there grew with the count;
                -- the triggers keep the number as jobs come, go and are dead-lettered. Statement-level triggers with
                -- transition tables: one UPDATE per device and statement, not one per job (a new device row version
                -- for every job of a batch).
                ALTER TABLE devices ADD COLUMN live_jobs INTEGER NOT NULL DEFAULT 0;
                UPDATE devices SET live_jobs = (SELECT count(*) FROM jobs WHERE jobs.device_id = devices.id AND jobs.state <> 'discarded');

                CREATE FUNCTION jobs_live_after_insert() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    UPDATE devices SET live_jobs = live_jobs + added.count
                    FROM (SELECT device_id, count(*) AS count FROM inserted WHERE state <> 'discarded' GROUP BY device_id) AS added
                    WHERE devices.id = added.device_id;
                    RETURN NULL;
                END $$;
                CREATE TRIGGER jobs_live_on_insert AFTER INSERT ON jobs REFERENCING NEW TABLE AS inserted
                    FOR EACH STATEMENT EXECUTE FUNCTION jobs_live_after_insert();

                CREATE FUNCTION jobs_live_after_delete() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    UPDATE devices SET live_jobs = live_jobs - gone.count
                    FROM (SELECT device_id, count(*) AS count FROM deleted WHERE state <> 'discarded' GROUP BY device_id) AS gone
                    WHERE devices.id = gone.device_id;
                    RETURN NULL;
                END $$;
                CREATE TRIGGER jobs_live_on_delete AFTER DELETE ON jobs REFERENCING OLD TABLE AS deleted
                    FOR EACH STATEMENT EXECUTE FUNCTION jobs_live_after_delete();

                -- PostgreSQL allows no column list (UPDATE OF state) with transition tables: every UPDATE of jobs runs
                -- it, and it changes a count only for rows that entered or left 'discarded'.
                CREATE FUNCTION jobs_live_after_update() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    UPDATE devices SET live_jobs = live_jobs + changed.delta
                    FROM (SELECT after.device_id, sum(CASE WHEN after.state = 'discarded' THEN -1 ELSE 1 END) AS delta
                          FROM before JOIN after ON after.id = before.id
                          WHERE (before.state = 'discarded') <> (after.state = 'discarded')
                          GROUP BY after.device_id) AS changed
                    WHERE devices.id = changed.device_id;
                    RETURN NULL;
                END $$;
                CREATE TRIGGER jobs_live_on_update AFTER UPDATE ON jobs REFERENCING OLD TABLE AS before NEW TABLE AS after
                    FOR EACH STATEMENT EXECUTE FUNCTION jobs_live_after_update();
                """),
        SharedMigrations.pushesPerMinute(.postgres),
        SharedMigrations.monitorStatesWithoutAgeIndex,
        Migration(
            version: 11, name: "live jobs counted by the statements that add and end them",
            sql: """
                -- The triggers of migration 7 built transition tables for every statement on jobs, the claim's and
                -- the promotion's included, and ran a PL/pgSQL function: a quarter of the ingest's write at a trickle
                -- (pg_stat_statements). The statements that add and end live jobs now set the count in the device
                -- rows they lock anyway: enqueue and replay raise it, finish lowers it in its device update. A
                -- deleted device takes its jobs and its count with it. (Version 10 is SQLite's alone.)
                DROP TRIGGER jobs_live_on_insert ON jobs;
                DROP TRIGGER jobs_live_on_delete ON jobs;
                DROP TRIGGER jobs_live_on_update ON jobs;
                DROP FUNCTION jobs_live_after_insert();
                DROP FUNCTION jobs_live_after_delete();
                DROP FUNCTION jobs_live_after_update();
                UPDATE devices SET live_jobs = (SELECT count(*) FROM jobs WHERE jobs.device_id = devices.id AND jobs.state <> 'discarded')
                WHERE live_jobs <> (SELECT count(*) FROM jobs WHERE jobs.device_id = devices.id AND jobs.state <> 'discarded');
                """),
        Migration(
            version: 13, name: "the live jobs Test requests wait on, indexed by device",
            sql: """
                -- At most one live job per device reports its outcome to a waiting Test request (SPEC §4): enqueue
                -- looks it up for every chunk holding a Test request, and jobs_by_device would walk every job of the
                -- device, dead letters included. This partial index holds only those few rows. (Version 12 is
                -- SQLite's alone.) Only adds an index: processes of the previous release go on working beside it.
                CREATE INDEX jobs_waiting_tests ON jobs (device_id) WHERE reports_outcome AND state <> 'discarded';
                """,
            keepsWorkingFrom: 11),
        Migration(
            version: 14, name: "what an alert-storm digest in flight carries, sealed",
            sql: """
                -- The newest job id a digest of this device carried. Enqueue folds no alert into a job at or below it:
                -- folded while the digest was in flight, the alert left the job behind, to go out again with the
                -- alerts the digest had shown. Only adds a column with a constant default (no table rewrite):
                -- processes of the previous release go on working beside it (ignoring the seal).
                ALTER TABLE devices ADD COLUMN digest_sealed_through BIGINT NOT NULL DEFAULT 0;
                """,
            keepsWorkingFrom: 11)
    ]

    static var latestVersion: Int { all.map(\.version).max() ?? 0 }

    /// Brings the database up to `latestVersion` (`MigrationRunner`); `upTo` stops at an older version (tests build a
    /// database as an older binary left it). Returns the database's schema version when done (`MigrationRunner.run`).
    @discardableResult
    static func apply(
        on connection: PGConnection, now: Int64, upTo newest: Int = latestVersion, logger: Logger? = nil,
        tableLockWait: Duration = defaultTableLockWait
    ) throws -> Int {
        let dialect = PostgresMigrationDialect(connection: connection, logger: logger, tableLockWait: tableLockWait)
        return try MigrationRunner(migrations: all, dialect: dialect).run(now: now, upTo: newest, logger: logger)
    }

    /// How long one attempt of a migration waits for a table's lock: every writer that comes after it queues behind
    /// it meanwhile, so at most half a second (SPEC §4: no migration blocks writers for more than a second), and
    /// half the relay's own `PG_LOCK_TIMEOUT`, so that its queued statements never fail (503) for the wait.
    /// With `PG_LOCK_TIMEOUT`'s default (5 s): where no store's settings apply (tests, the schema probe).
    static let defaultTableLockWait = tableLockWait(sessionLockTimeout: .seconds(5))

    static func tableLockWait(sessionLockTimeout: Duration) -> Duration {
        // At least a millisecond: `lock_timeout = 0` would mean no limit.
        max(min(sessionLockTimeout / 2, .milliseconds(500)), .milliseconds(1))
    }
}

/// `MigrationRunner`'s steps on PostgreSQL: each transaction takes an advisory lock, so that of several processes
/// starting together one migrates at a time and the others wait, then find nothing left to do.
///
/// The transactions run without the session's `statement_timeout` (SPEC §4: migrations are not cut short): a
/// migration over a large queue may run longer than any statement the relay otherwise sends. The advisory lock is
/// waited for as long as another process's migration holds it; nobody queues behind that. A table's lock is another
/// matter: while a migration waits for it (behind a long transaction, or an older process's), every writer that
/// comes after queues behind the migration, and the relay's own statements would fail at their `lock_timeout` (503,
/// a lost alert). So each attempt waits at most `tableLockWait` for tables, then rolls back, lets the writers
/// through for a second, and tries again, as long as it takes. `SET LOCAL` ends with the transaction. A host that
/// froze holding a lock is ended by the server after `idle_in_transaction_session_timeout`.
final class PostgresMigrationDialect: MigrationDialect {
    private let connection: PGConnection
    private let logger: Logger?
    private let tableLockWait: Duration
    /// Whether this process already said it waits for another's migration, or for a table's lock (once is enough).
    private var saidItWaits = false
    /// Attempts that gave up on a table's lock so far.
    private var retries = 0

    init(connection: PGConnection, logger: Logger?, tableLockWait: Duration = PostgresMigrations.defaultTableLockWait) {
        self.connection = connection
        self.logger = logger
        self.tableLockWait = tableLockWait
    }

    var upgradeNote: String {
        "it waits for a table's lock at most \(tableLockWait.wholeMilliseconds) ms at a time, then lets writers queued behind it through"
    }

    func transaction<T>(_ body: () throws -> T) throws -> T {
        while true {
            do {
                return try attempt(body)
            } catch let error as PGError where error.sqlstate == PGError.lockNotAvailable && !error.connectionBroken {
                // Said at the first retry and every minute or so after: a transaction left open by hand holds it up
                // for as long as it stays open. (An autovacuum is not cancelled for it, as it is for a wait past
                // `deadlock_timeout`: the migration goes ahead when the vacuum ends.)
                if retries % 40 == 0 {
                    logger?.warning(
                        "a database schema migration waits for a table another session holds; it lets writers through and retries every second",
                        ["error": error.message, "retries": String(retries)])
                }
                retries += 1
                Thread.sleep(forTimeInterval: 1)
            }
        }
    }

    private func attempt<T>(_ body: () throws -> T) throws -> T {
        try connection.transaction { connection in
            try connection.execute("SET LOCAL statement_timeout = 0; SET LOCAL lock_timeout = 0")
            let lock = "hashtext('kumapush-relay schema_migrations')"
            if try connection.rows("SELECT pg_try_advisory_xact_lock(\(lock))", prepare: false, { $0.bool(0) }).first != true {
                if !saidItWaits { logger?.info("another process is upgrading the database schema; waiting for it, without a time limit") }
                saidItWaits = true
                try connection.execute("SELECT pg_advisory_xact_lock(\(lock))")
            }
            try connection.execute("SET LOCAL lock_timeout = \(tableLockWait.wholeMilliseconds)")
            return try body()
        }
    }

    func tableNames() throws -> [String] {
        try connection.rows("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()") { $0.text(0) }
    }

    func createLedger() throws {
        try connection.execute(
            """
            CREATE TABLE IF NOT EXISTS schema_migrations (
                version INTEGER PRIMARY KEY,
                name TEXT NOT NULL,
                applied_at BIGINT NOT NULL,
                keeps_working_from INTEGER
            )
            """)
        let columns = try connection.rows(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = 'schema_migrations'",
            prepare: false
        ) { $0.text(0) }
        if !columns.contains("keeps_working_from") {
            // A ledger older releases made: a nullable column they never name (they insert by column list). Altered
            // only when missing, as the ALTER takes the table's exclusive lock, which readiness pings would wait for.
            try connection.execute("ALTER TABLE schema_migrations ADD COLUMN keeps_working_from INTEGER")
        }
    }

    func appliedVersions() throws -> Set<Int> {
        Set(try connection.rows("SELECT version FROM schema_migrations", prepare: false) { $0.int(0) })
    }

    func keptWorkingFrom() throws -> [Int: Int] {
        let rows = try connection.rows(
            "SELECT version, keeps_working_from FROM schema_migrations WHERE keeps_working_from IS NOT NULL", prepare: false
        ) { ($0.int(0), $0.int(1)) }
        return Dictionary(rows) { first, _ in first }
    }

    func execute(_ sql: String) throws { try connection.execute(sql) }

    func record(_ migration: Migration, now: Int64) throws {
        try connection.run(
            "INSERT INTO schema_migrations (version, name, applied_at, keeps_working_from) VALUES ($1::integer, $2::text, $3::bigint, $4::integer)",
            [
                .integer(Int64(migration.version)), .text(migration.name), .integer(now),
                migration.keepsWorkingFrom.map { .integer(Int64($0)) } ?? .null
            ],
            prepare: false)
    }
}
