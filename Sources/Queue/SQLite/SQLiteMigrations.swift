import Common
import SQLiteDriver

/// The SQLite schema, as numbered, append-only migrations, applied by `MigrationRunner`. Never edit a shipped
/// migration: add the next number.
enum Migrations {
    static let all: [Migration] = [
        SharedMigrations.devicesTombstonesAndJobs(.sqlite),
        SharedMigrations.reportedOutcomes(.sqlite),
        SharedMigrations.foldedAlerts(.sqlite),
        SharedMigrations.failedOutcomesAndPauses(
            .sqlite,
            allowingFailed: """
                CREATE TABLE job_outcomes_4 (
                    public_id TEXT PRIMARY KEY NOT NULL,
                    outcome TEXT NOT NULL CHECK (outcome IN ('delivered', 'rejected', 'unregistered', 'failed')),
                    reason TEXT NOT NULL DEFAULT '',
                    finished_at INTEGER NOT NULL
                );
                INSERT INTO job_outcomes_4 SELECT public_id, outcome, reason, finished_at FROM job_outcomes;
                DROP TABLE job_outcomes;
                ALTER TABLE job_outcomes_4 RENAME TO job_outcomes;
                """),
        SharedMigrations.monitorStates(.sqlite),
        SharedMigrations.apnsEnvironment,
        Migration(
            version: 7, name: "live jobs per device, kept by triggers",
            sql: """
                -- DEVICE_QUEUE_MAX is checked on every enqueue: counting a device's jobs there grew with the count
                -- (quadratic over a storm); the triggers keep the number as jobs come, go and are dead-lettered.
                ALTER TABLE devices ADD COLUMN live_jobs INTEGER NOT NULL DEFAULT 0;
                UPDATE devices SET live_jobs = (SELECT count(*) FROM jobs WHERE jobs.device_id = devices.id AND jobs.state != 'discarded');
                CREATE TRIGGER jobs_live_on_insert AFTER INSERT ON jobs WHEN NEW.state != 'discarded'
                BEGIN UPDATE devices SET live_jobs = live_jobs + 1 WHERE id = NEW.device_id; END;
                CREATE TRIGGER jobs_live_on_delete AFTER DELETE ON jobs WHEN OLD.state != 'discarded'
                BEGIN UPDATE devices SET live_jobs = live_jobs - 1 WHERE id = OLD.device_id; END;
                CREATE TRIGGER jobs_live_on_discard AFTER UPDATE OF state ON jobs
                WHEN (OLD.state = 'discarded') != (NEW.state = 'discarded')
                BEGIN
                    UPDATE devices SET live_jobs = live_jobs + CASE WHEN NEW.state = 'discarded' THEN -1 ELSE 1 END
                    WHERE id = NEW.device_id;
                END;
                """),
        SharedMigrations.pushesPerMinute(.sqlite),
        SharedMigrations.monitorStatesWithoutAgeIndex,
        Migration(
            version: 10, name: "job states tested without constant IN lists",
            sql: """
                -- SQLite evaluates `state IN (three or more constants)` by building a temporary B-tree each time a
                -- statement runs: the CHECK on every insert and state change, and jobs_one_head_per_device's WHERE on
                -- every write of a row, cost one each (2-6 µs a statement, three or four a delivered push). The same
                -- tests written with OR are plain comparisons. A CHECK cannot be altered: the table is rebuilt, ids
                -- (acceptance order) kept; indexes and triggers are created again as they were.
                CREATE TABLE jobs_10 (
                    id INTEGER PRIMARY KEY,
                    public_id TEXT NOT NULL,
                    device_id TEXT NOT NULL REFERENCES devices (id) ON DELETE CASCADE,
                    state TEXT NOT NULL CHECK (state = 'pending' OR state = 'available' OR state = 'running'
                                               OR state = 'retryable' OR state = 'discarded'),
                    payload BLOB NOT NULL,
                    attempt INTEGER NOT NULL DEFAULT 0 CHECK (attempt >= 0),
                    created_at INTEGER NOT NULL,
                    scheduled_at INTEGER NOT NULL,
                    expires_at INTEGER NOT NULL,
                    attempted_at INTEGER,
                    attempted_by TEXT,
                    lease_expires_at INTEGER,
                    last_error TEXT NOT NULL DEFAULT '',
                    finalized_at INTEGER,
                    reports_outcome INTEGER NOT NULL DEFAULT 0 CHECK (reports_outcome IN (0, 1)),
                    folded BLOB,
                    folded_count INTEGER NOT NULL DEFAULT 0 CHECK (folded_count >= 0),
                    badge INTEGER,
                    CHECK ((state = 'running') = (attempted_by IS NOT NULL AND lease_expires_at IS NOT NULL)),
                    CHECK ((state = 'discarded') = (finalized_at IS NOT NULL))
                );
                INSERT INTO jobs_10 (id, public_id, device_id, state, payload, attempt, created_at, scheduled_at, expires_at,
                                     attempted_at, attempted_by, lease_expires_at, last_error, finalized_at, reports_outcome,
                                     folded, folded_count, badge)
                SELECT id, public_id, device_id, state, payload, attempt, created_at, scheduled_at, expires_at,
                       attempted_at, attempted_by, lease_expires_at, last_error, finalized_at, reports_outcome,
                       folded, folded_count, badge
                FROM jobs;
                DROP TABLE jobs;
                ALTER TABLE jobs_10 RENAME TO jobs;
                -- Queries that need this index name its condition word for word (SQLiteStore.isHead).
                CREATE UNIQUE INDEX jobs_one_head_per_device ON jobs (device_id)
                    WHERE state = 'available' OR state = 'running' OR state = 'retryable';
                CREATE INDEX jobs_by_device ON jobs (device_id, id);
                CREATE INDEX jobs_due ON jobs (scheduled_at) WHERE state IN ('available', 'retryable');
                CREATE INDEX jobs_leased ON jobs (lease_expires_at) WHERE state = 'running';
                CREATE INDEX jobs_dead ON jobs (finalized_at) WHERE state = 'discarded';
                CREATE TRIGGER jobs_live_on_insert AFTER INSERT ON jobs WHEN NEW.state != 'discarded'
                BEGIN UPDATE devices SET live_jobs = live_jobs + 1 WHERE id = NEW.device_id; END;
                CREATE TRIGGER jobs_live_on_delete AFTER DELETE ON jobs WHEN OLD.state != 'discarded'
                BEGIN UPDATE devices SET live_jobs = live_jobs - 1 WHERE id = OLD.device_id; END;
                CREATE TRIGGER jobs_live_on_discard AFTER UPDATE OF state ON jobs
                WHEN (OLD.state = 'discarded') != (NEW.state = 'discarded')
                BEGIN
                    UPDATE devices SET live_jobs = live_jobs + CASE WHEN NEW.state = 'discarded' THEN -1 ELSE 1 END
                    WHERE id = NEW.device_id;
                END;
                """),
        Migration(
            version: 11, name: "live jobs counted by the statements that end them",
            sql: """
                -- A trigger runs as a sub-program on every row its table event touches, and an UPDATE OF state trigger
                -- on every state change, WHEN clause or not: the delete trigger cost a delivered push about 19,000
                -- instructions and the discard trigger 10,000 more over its claim and promotion (callgrind, 1,000-job
                -- batches). Only two statements end a live job, both in SQLiteStore.finish (its delete or discard,
                -- and settling the jobs merged into a digest); they now lower the count in the device update they
                -- make anyway. A deleted device takes its jobs and its count with it. Inserts keep their trigger.
                DROP TRIGGER jobs_live_on_delete;
                DROP TRIGGER jobs_live_on_discard;
                """),
        Migration(
            version: 12, name: "each device's jobs numbered; the index by device ordered by number",
            sql: """
                -- Completing a job deleted its entry in jobs_by_device (device_id, id), where each device's entries sit
                -- together: with a thousand devices queued a thousand deep, each completion of a batch wrote a leaf page
                -- of its own, and claim at 1M ran at 0.71 of its rate at 10k (docs/performance.md). Each job now
                -- carries its device's job number (acceptance order within the device; the next one is kept on the
                -- device row) and the index is (device_seq, device_id), so the heads of devices that move in step share
                -- a few leaf pages. Any index that starts with device_id would bring the page back, and the foreign
                -- key's cascade needs one: the key goes, and deleting a device deletes its jobs itself
                -- (SQLiteStore+DeviceJobs.swift). Dead letters are found by device through a partial index of their own.
                ALTER TABLE devices ADD COLUMN next_seq INTEGER NOT NULL DEFAULT 0;
                CREATE TABLE jobs_12 (
                    id INTEGER PRIMARY KEY,
                    public_id TEXT NOT NULL,
                    device_id TEXT NOT NULL,
                    device_seq INTEGER NOT NULL CHECK (device_seq >= 0),
                    state TEXT NOT NULL CHECK (state = 'pending' OR state = 'available' OR state = 'running'
                                               OR state = 'retryable' OR state = 'discarded'),
                    payload BLOB NOT NULL,
                    attempt INTEGER NOT NULL DEFAULT 0 CHECK (attempt >= 0),
                    created_at INTEGER NOT NULL,
                    scheduled_at INTEGER NOT NULL,
                    expires_at INTEGER NOT NULL,
                    attempted_at INTEGER,
                    attempted_by TEXT,
                    lease_expires_at INTEGER,
                    last_error TEXT NOT NULL DEFAULT '',
                    finalized_at INTEGER,
                    reports_outcome INTEGER NOT NULL DEFAULT 0 CHECK (reports_outcome IN (0, 1)),
                    folded BLOB,
                    folded_count INTEGER NOT NULL DEFAULT 0 CHECK (folded_count >= 0),
                    badge INTEGER,
                    CHECK ((state = 'running') = (attempted_by IS NOT NULL AND lease_expires_at IS NOT NULL)),
                    CHECK ((state = 'discarded') = (finalized_at IS NOT NULL))
                );
                INSERT INTO jobs_12 (id, public_id, device_id, device_seq, state, payload, attempt, created_at, scheduled_at,
                                     expires_at, attempted_at, attempted_by, lease_expires_at, last_error, finalized_at,
                                     reports_outcome, folded, folded_count, badge)
                SELECT id, public_id, device_id, row_number() OVER (PARTITION BY device_id ORDER BY id) - 1, state, payload,
                       attempt, created_at, scheduled_at, expires_at, attempted_at, attempted_by, lease_expires_at,
                       last_error, finalized_at, reports_outcome, folded, folded_count, badge
                FROM jobs;
                DROP TABLE jobs;
                ALTER TABLE jobs_12 RENAME TO jobs;
                UPDATE devices SET next_seq = numbered.next
                FROM (SELECT device_id, max(device_seq) + 1 AS next FROM jobs GROUP BY device_id) AS numbered
                WHERE devices.id = numbered.device_id;
                CREATE UNIQUE INDEX jobs_one_head_per_device ON jobs (device_id)
                    WHERE state = 'available' OR state = 'running' OR state = 'retryable';
                CREATE UNIQUE INDEX jobs_by_device_seq ON jobs (device_seq, device_id);
                CREATE INDEX jobs_dead_by_device ON jobs (device_id) WHERE state = 'discarded';
                CREATE INDEX jobs_due ON jobs (scheduled_at) WHERE state IN ('available', 'retryable');
                CREATE INDEX jobs_leased ON jobs (lease_expires_at) WHERE state = 'running';
                CREATE INDEX jobs_dead ON jobs (finalized_at) WHERE state = 'discarded';
                -- The device row an insert updates anyway also hands out the next number.
                CREATE TRIGGER jobs_live_on_insert AFTER INSERT ON jobs
                BEGIN
                    UPDATE devices SET live_jobs = live_jobs + (NEW.state != 'discarded'),
                                       next_seq = max(next_seq, NEW.device_seq + 1)
                    WHERE id = NEW.device_id;
                END;
                """),
        Migration(
            version: 13, name: "the live jobs Test requests wait on, indexed by device",
            sql: """
                -- At most one live job per device reports its outcome to a waiting Test request (SPEC §4): enqueue
                -- looks it up for every Test request. Jobs are not indexed by device (migration 12), and the partial
                -- index holds only those few rows, so alerts never touch it. Only adds an index: processes of the
                -- previous release go on working beside it.
                CREATE INDEX jobs_waiting_tests ON jobs (device_id) WHERE reports_outcome = 1 AND state != 'discarded';
                """,
            keepsWorkingFrom: 12),
        Migration(
            version: 14, name: "what an alert-storm digest in flight carries, sealed",
            sql: """
                -- The newest job (by device_seq: a rowid may be given again once the newest rows are deleted) a digest
                -- of this device carried. Enqueue folds no alert into a job at or below it: folded while the digest
                -- was in flight, the alert left the job behind, to go out again with the alerts the digest had shown.
                -- Only adds a column: processes of the previous release go on working beside it (ignoring the seal).
                ALTER TABLE devices ADD COLUMN digest_sealed_through INTEGER NOT NULL DEFAULT 0;
                """,
            keepsWorkingFrom: 12)
    ]

    static var latestVersion: Int { all.map(\.version).max() ?? 0 }

    /// Brings the database up to `latestVersion` (`MigrationRunner`). `beforeEach` runs before each missing
    /// migration's transaction: tests play another process there, applying the migration after this one read the list.
    /// Returns the database's schema version when done (`MigrationRunner.run`).
    @discardableResult
    static func apply(
        on connection: SQLiteConnection, now: Int64, logger: Logger? = nil, beforeEach: (Migration) throws -> Void = { _ in }
    ) throws -> Int {
        // Processes started together (ingest and deliverers under systemd) wait for the one upgrading, however long
        // its migrations take (migration 12: about 20 s a million jobs), instead of giving up at the busy timeout.
        try connection.withBusyTimeout(millis: upgradeWaitMillis) {
            try MigrationRunner(migrations: all, dialect: SQLiteMigrationDialect(connection: connection))
                .run(now: now, logger: logger, beforeEach: beforeEach)
        }
    }

    /// How long a process waits for another's schema upgrade before it gives up.
    static let upgradeWaitMillis: Int32 = 15 * 60 * 1000
}

/// `MigrationRunner`'s steps on SQLite: `BEGIN IMMEDIATE` takes the database's write lock, which is the lock every
/// migrating process waits for.
struct SQLiteMigrationDialect: MigrationDialect {
    let connection: SQLiteConnection

    var upgradeNote: String { "this process goes on when it is done" }

    func transaction<T>(_ body: () throws -> T) throws -> T { try connection.writeTransaction(body) }

    func tableNames() throws -> [String] {
        try connection.statement("SELECT name FROM sqlite_master WHERE type = 'table'").rows { $0.text(0) }
    }

    func createLedger() throws {
        try connection.execute(
            """
            CREATE TABLE IF NOT EXISTS schema_migrations (
                version INTEGER PRIMARY KEY NOT NULL,
                name TEXT NOT NULL,
                applied_at INTEGER NOT NULL,
                keeps_working_from INTEGER
            )
            """)
        let columns = try connection.statement("SELECT name FROM pragma_table_info('schema_migrations')").rows { $0.text(0) }
        if !columns.contains("keeps_working_from") {
            // A ledger older releases made: a nullable column they never name (they insert by column list).
            try connection.execute("ALTER TABLE schema_migrations ADD COLUMN keeps_working_from INTEGER")
        }
    }

    func appliedVersions() throws -> Set<Int> {
        Set(try connection.statement("SELECT version FROM schema_migrations").rows { $0.int(0) })
    }

    func keptWorkingFrom() throws -> [Int: Int] {
        let rows = try connection.statement("SELECT version, keeps_working_from FROM schema_migrations WHERE keeps_working_from IS NOT NULL")
            .rows { ($0.int(0), $0.int(1)) }
        return Dictionary(rows) { first, _ in first }
    }

    func execute(_ sql: String) throws { try connection.execute(sql) }

    func record(_ migration: Migration, now: Int64) throws {
        try connection.statement("INSERT INTO schema_migrations (version, name, applied_at, keeps_working_from) VALUES (?, ?, ?, ?)")
            .run([
                .integer(Int64(migration.version)), .text(migration.name), .integer(now),
                migration.keepsWorkingFrom.map { .integer(Int64($0)) } ?? .null
            ])
    }
}
