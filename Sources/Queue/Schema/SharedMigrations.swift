/// The shipped migrations whose statements both stores share, written once in each store's words (`SchemaWords`);
/// each store's list (`Migrations`, `PostgresMigrations`) names them in order beside its own. Never edit a shipped
/// migration: add the next number (`ShippedMigrationTests` pins their statements).
enum SharedMigrations {
    static func devicesTombstonesAndJobs(_ words: SchemaWords) -> Migration {
        Migration(
            version: 1, name: "devices, tombstones and jobs",
            sql: """
                CREATE TABLE devices (
                    id TEXT \(words.primaryKey),
                    device_token TEXT NOT NULL UNIQUE,
                    auth_token_hash TEXT NOT NULL DEFAULT '',
                    date_added \(words.int64) NOT NULL,
                    last_successful_notification \(words.int64),
                    last_delivery_error TEXT NOT NULL DEFAULT '',
                    down_notification_level TEXT NOT NULL DEFAULT 'normal'
                        CHECK (down_notification_level IN ('normal', 'time-sensitive'))
                );

                CREATE TABLE tombstones (
                    device_id TEXT \(words.primaryKey),
                    reason TEXT NOT NULL,
                    removed_at \(words.int64) NOT NULL
                );
                CREATE INDEX tombstones_by_age ON tombstones (removed_at);

                -- Times are milliseconds since 1970. id order is acceptance order (on PostgreSQL per device: enqueue
                -- locks the device row before it draws ids, so two transactions writing one device's jobs take their
                -- ids one after the other).
                CREATE TABLE jobs (
                    id \(words.jobID),
                    public_id TEXT NOT NULL,
                    device_id TEXT NOT NULL REFERENCES devices (id) ON DELETE CASCADE,
                    state TEXT NOT NULL CHECK (state IN ('pending', 'available', 'running', 'retryable', 'discarded')),
                    payload \(words.bytes) NOT NULL,
                    attempt INTEGER NOT NULL DEFAULT 0 CHECK (attempt >= 0),
                    created_at \(words.int64) NOT NULL,
                    scheduled_at \(words.int64) NOT NULL,
                    expires_at \(words.int64) NOT NULL,
                    attempted_at \(words.int64),
                    attempted_by TEXT,
                    lease_expires_at \(words.int64),
                    last_error TEXT NOT NULL DEFAULT '',
                    finalized_at \(words.int64),
                    CHECK ((state = 'running') = (attempted_by IS NOT NULL AND lease_expires_at IS NOT NULL)),
                    CHECK ((state = 'discarded') = (finalized_at IS NOT NULL))
                );
                -- At most one head (available, running or retryable) per device: per-device order, enforced by \(words.engine).
                CREATE UNIQUE INDEX jobs_one_head_per_device ON jobs (device_id)
                    WHERE state IN ('available', 'running', 'retryable');
                CREATE INDEX jobs_by_device ON jobs (device_id, id);
                CREATE INDEX jobs_due ON jobs (scheduled_at) WHERE state IN ('available', 'retryable');
                CREATE INDEX jobs_leased ON jobs (lease_expires_at) WHERE state = 'running';
                CREATE INDEX jobs_dead ON jobs (finalized_at) WHERE state = 'discarded';
                """)
    }

    static func reportedOutcomes(_ words: SchemaWords) -> Migration {
        Migration(
            version: 2, name: "outcomes reported to waiting Test-button requests",
            sql: """
                -- Set for jobs whose webhook waits for APNs' answer (the Test button): their outcome is recorded below.
                ALTER TABLE jobs ADD COLUMN reports_outcome \(words.booleanFalseByDefault("reports_outcome"));
                -- Outcomes of such jobs, read by the ingest process that holds the request; purged after minutes.
                CREATE TABLE job_outcomes (
                    public_id TEXT \(words.primaryKey),
                    outcome TEXT NOT NULL CHECK (outcome IN ('delivered', 'rejected', 'unregistered')),
                    reason TEXT NOT NULL DEFAULT '',
                    finished_at \(words.int64) NOT NULL
                );
                """)
    }

    static func foldedAlerts(_ words: SchemaWords) -> Migration {
        Migration(
            version: 3, name: "alerts folded into a waiting job past DEVICE_QUEUE_MAX",
            sql: """
                -- FoldedAlerts as compact JSON (names while they fit a small budget, then counts); NULL for most jobs.
                ALTER TABLE jobs ADD COLUMN folded \(words.bytes);
                -- How many alerts were folded in: also the fence a digest completes the job with.
                ALTER TABLE jobs ADD COLUMN folded_count INTEGER NOT NULL DEFAULT 0 CHECK (folded_count >= 0);
                """)
    }

    /// `allowingFailed`: the store's own statements that let `job_outcomes.outcome` be 'failed'.
    static func failedOutcomesAndPauses(_ words: SchemaWords, allowingFailed: String) -> Migration {
        Migration(
            version: 4, name: "Test-button outcomes the relay gave up on; deliverers paused by a configuration fault",
            sql: """
                -- 'failed': the relay gave up on the push itself (it expired, it could not be built); APNs never refused it.
                \(allowingFailed)
                -- A deliverer paused by a configuration fault (BadTopic, InvalidProviderToken…) says so here, refreshed
                -- while it lasts, so an ingest process anywhere answers a waiting Test request with 502 at once.
                CREATE TABLE delivery_pauses (
                    worker TEXT \(words.primaryKey),
                    reason TEXT NOT NULL,
                    updated_at \(words.int64) NOT NULL
                );
                """)
    }

    static func monitorStates(_ words: SchemaWords) -> Migration {
        Migration(
            version: 5, name: "monitor states per device for the badge",
            sql: """
                -- The last state each monitor reported to a device: a monitor id (or a hash of its name), down or up.
                -- Nothing else: no names, no messages. Rows not updated for TOMBSTONE_RETENTION no longer count.
                CREATE TABLE monitor_states (
                    device_id TEXT NOT NULL REFERENCES devices (id) ON DELETE CASCADE,
                    monitor TEXT NOT NULL,
                    down \(words.boolean("down")),
                    updated_at \(words.int64) NOT NULL,
                    PRIMARY KEY (device_id, monitor)
                )\(words.keyedTable);
                CREATE INDEX monitor_states_by_age ON monitor_states (updated_at);
                -- How many of the device's monitors were down as of this job's alert (aps.badge); NULL before version 5.
                ALTER TABLE jobs ADD COLUMN badge INTEGER;
                """)
    }

    static let apnsEnvironment = Migration(
        version: 6, name: "the APNs environment a device's token belongs to",
        sql: """
            -- Learnt when the other environment accepted a push the configured one refused as BadDeviceToken
            -- (TestFlight and Xcode builds next to App Store installs); NULL until then. A new token forgets it.
            ALTER TABLE devices ADD COLUMN apns_environment TEXT CHECK (apns_environment IN ('production', 'sandbox'));
            """)

    static func pushesPerMinute(_ words: SchemaWords) -> Migration {
        Migration(
            version: 8, name: "pushes per device per minute, shared by every deliverer",
            sql: """
                -- DEVICE_BURST across every deliverer (SPEC §3 alert storms): pushes APNs accepted for the device in the
                -- minute that started at burst_started_at (ms). Kept here, not in one process's memory, so several
                -- deliver processes agree on when a device's waiting alerts merge into a digest.
                ALTER TABLE devices ADD COLUMN burst_started_at \(words.int64) NOT NULL DEFAULT 0;
                ALTER TABLE devices ADD COLUMN burst_count INTEGER NOT NULL DEFAULT 0;
                """)
    }

    static let monitorStatesWithoutAgeIndex = Migration(
        version: 9, name: "monitor states without an index by age",
        sql: """
            -- Every alert rewrites its monitor's row, and with it this index's entry: one more B-tree written per
            -- webhook (ingest to 1,000 devices ran ~10 % faster without it, make bench). Only the purge used it,
            -- every ten minutes; it now scans the table, whose size is devices × monitors.
            DROP INDEX monitor_states_by_age;
            """)
}
