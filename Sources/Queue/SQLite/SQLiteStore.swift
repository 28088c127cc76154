import Common
import SQLiteDriver
import Synchronization

/// `RelayStore` on one SQLite file in WAL mode. Any number of processes may open the same file: writes take the
/// database's write lock with `BEGIN IMMEDIATE` and wait up to the busy timeout for it.
///
/// Each connection is confined by a `Mutex`: SQLite connections opened with `SQLITE_OPEN_NOMUTEX` must not be used by
/// two threads at once, and the mutex is the only way to reach one. Four connections, so that slow work never
/// queues in front of the delivery path: the writer; the reader for point lookups (`/health`, tombstones, the
/// deliverer's change counter); one for `stats()`, whose full scans a metrics scrape runs; and one that a
/// `WALCheckpointer` thread copies the write-ahead log into the database with (off the writer's commits), and a
/// `WALTruncator` thread truncates it with when writes pause and at least every `walTruncateInterval`.
public final class SQLiteStore: Sendable {
    public struct Options: Sendable {
        /// `synchronous=FULL` (power-loss durable) instead of `NORMAL` (process-crash durable).
        public var synchronousFull = false
        /// How long a write waits for another process's write lock before failing with `.unavailable`.
        public var busyTimeout: Duration = .seconds(5)
        /// A monitor not heard of for this long no longer counts towards a device's badge (TOMBSTONE_RETENTION).
        public var monitorRetention: Duration = .seconds(30 * 86_400)
        /// The longest written (and deleted) content may stay in the `-wal` file; nil never truncates it.
        public var walTruncateInterval: Duration? = .seconds(60)
        /// Where an upgrade of an existing database says what it does and how long it took: some migrations rebuild
        /// the queue (migration 12: about 20 s for a million queued jobs), and a process that starts silently for
        /// that long looks hung.
        public var logger: Logger?
        /// The writer keeps its temporary tables and statement journals in memory (`temp_store = MEMORY`), so no copy
        /// of notification content goes to a temporary file. Off only for the tests that show the statements that
        /// change a batch of jobs keep no statement journal of their own (`StatementJournalTests`).
        public var temporaryTablesInMemory = true
        /// The WAL checkpoint thread runs ten nice levels below the thread that opens the store
        /// (`WALCheckpointer.yieldingPriorityDrop`): for `ingest`, whose HTTP threads and queue writer should have the
        /// cores first; not for a deliverer, whose drains then cost more CPU a push.
        public var checkpointsYield = false

        public init(
            synchronousFull: Bool = false, busyTimeout: Duration = .seconds(5),
            monitorRetention: Duration = .seconds(30 * 86_400), walTruncateInterval: Duration? = .seconds(60), logger: Logger? = nil,
            checkpointsYield: Bool = false
        ) {
            self.checkpointsYield = checkpointsYield
            self.synchronousFull = synchronousFull
            self.busyTimeout = busyTimeout
            self.monitorRetention = monitorRetention
            self.walTruncateInterval = walTruncateInterval
            self.logger = logger
        }

        /// The writer's connection options; the readers take a smaller page cache.
        var connection: SQLiteConnection.Options {
            SQLiteConnection.Options(busyTimeoutMillis: Int32(clamping: busyTimeout.wholeMilliseconds), synchronousFull: synchronousFull)
        }
    }

    let options: Options

    private let writer: Mutex<SQLiteConnection>
    /// A second connection for reads. In WAL mode readers never wait for the writer, so a webhook's tombstone
    /// lookup or `/health` does not queue behind a group commit.
    private let reader: Mutex<SQLiteConnection>
    /// `stats()` only: its scans (up to a million jobs) hold this connection, not the reader the delivery loop polls.
    private let statsReader: Mutex<SQLiteConnection>
    private let truncator: WALTruncator?
    /// Copies the WAL into the database off the writer's commits (see `WALCheckpointer`).
    private let checkpointer: WALCheckpointer
    /// The database's schema version as opened: this release's, or a newer release's that keeps it working.
    public let databaseSchemaVersion: Int

    /// Opens (creating if needed) the database at `path` and applies pending migrations.
    public init(path: String, options: Options = Options(), now: Int64) throws(StoreError) {
        self.options = options
        do {
            let opened = try SQLiteConnection(path: path, options: options.connection)
            databaseSchemaVersion = try Migrations.apply(on: opened, now: now, logger: options.logger)
            // After the migrations, whose table rebuilds may sort a whole queue: from here the writer's temporary
            // tables (a claim's RETURNING rows, a finish's `IN (…)` list) and statement journals stay in memory instead
            // of spilling notification content to an unlinked file in /var/tmp past SQLite's 2 MiB temporary cache.
            // Each is as large as what one statement returns or changes: the statements that change a batch of jobs
            // keep no statement journal at all (`UPDATE OR FAIL`), and a claim returns at most DELIVER_CONCURRENCY jobs.
            if options.temporaryTablesInMemory { try opened.execute("PRAGMA temp_store = MEMORY") }
            // The writer counts its jobs on their devices itself (`enqueue`, `requeue`), once a device a batch,
            // instead of through `jobs_live_on_insert`, which ran as a sub-program for every row. The trigger stays
            // in the schema for processes of the release before during a rolling upgrade, which rely on it.
            try opened.disableTriggers()
            // Reads are point lookups and the occasional stats scan: a small cache keeps the process small.
            var readOptions = options.connection
            readOptions.cacheKiB = 4096
            let readConnection = try SQLiteConnection(path: path, options: readOptions)
            let statsConnection = try SQLiteConnection(path: path, options: readOptions)
            let checkpointConnection = try CheckpointConnection(path: path, synchronousFull: options.synchronousFull)
            let checkpointer = WALCheckpointer(
                connection: checkpointConnection, yields: options.checkpointsYield, logger: options.logger)
            opened.reportWALCommits(to: checkpointer)
            self.checkpointer = checkpointer
            writer = Mutex(opened)
            reader = Mutex(readConnection)
            statsReader = Mutex(statsConnection)
            truncator = options.walTruncateInterval.map { interval in
                WALTruncator(policy: WALTruncationPolicy(interval: interval)) { checkpointConnection.truncateWAL() }
            }
        } catch {
            throw Self.storeError(error)
        }
    }

    deinit {
        truncator?.stop()
        checkpointer.stop()
    }

    /// The linked SQLite library version, e.g. `3.40.1`.
    public static var libraryVersion: String { SQLiteConnection.libraryVersion }

    /// The schema version this binary migrates to.
    public static var schemaVersion: Int { Migrations.latestVersion }

    /// Every migration this binary applies, by version.
    public static var migrationVersions: [Int] { Migrations.all.map(\.version) }

    /// Runs `body` with the connection, mapping SQLite failures to `StoreError`.
    func withConnection<T: Sendable>(_ body: (SQLiteConnection) throws -> T) throws(StoreError) -> T {
        try StoreError.translating(Self.storeError) { try writer.withLock { connection in try body(connection) } }
    }

    /// Statements the writer and the reader keep prepared (tests check that they stay bounded over time).
    var preparedStatementCount: Int {
        writer.withLock { $0.preparedStatementCount } + reader.withLock { $0.preparedStatementCount }
    }

    /// Runs `body` with the read connection (a consistent snapshot per statement), mapping failures to `StoreError`.
    func read<T: Sendable>(_ body: (SQLiteConnection) throws -> T) throws(StoreError) -> T {
        try StoreError.translating(Self.storeError) { try reader.withLock { connection in try body(connection) } }
    }

    /// Runs `body` in a write transaction (see `SQLiteConnection.writeTransaction`).
    func write<T: Sendable>(_ body: (SQLiteConnection) throws -> T) throws(StoreError) -> T {
        let result = try withConnection { connection in try connection.writeTransaction { try body(connection) } }
        truncator?.noteWrite()
        return result
    }

    private static func storeError(_ error: any Error) -> StoreError {
        switch error {
        case let error as StoreError: return error
        case let error as SQLiteError where error.isCorruption:
            return StoreError(.notADatabase, "the file is not a SQLite database or is damaged (\(error.message))")
        case let error as SQLiteError where error.isEnvironmental: return StoreError(.unavailable, error.description)
        default: return StoreError(.failed, "\(error)")
        }
    }

    /// The value of a single-valued pragma (diagnostics and tests), e.g. `secure_delete` → "1".
    package func pragma(_ name: String) throws(StoreError) -> String {
        try withConnection { try $0.pragma(name) }
    }

    /// Copies the WAL into the database file and truncates the WAL now (diagnostics and tests).
    package func checkpoint() throws(StoreError) {
        try withConnection { try $0.execute("PRAGMA wal_checkpoint(TRUNCATE)") }
    }

    func withStatsConnection<T: Sendable>(_ body: (SQLiteConnection) throws -> T) throws(StoreError) -> T {
        try StoreError.translating(Self.storeError) { try statsReader.withLock { db in try body(db) } }
    }

    /// `values` as lists for `IN (…)`, at most 512 to a statement (SQLite binds at most 32,766 parameters; the
    /// callers' lists are a batch long). Each list is padded with NULLs (which match nothing) to a power of two: the
    /// connection keeps every statement text it prepared, so one text per list length would leave up to 512 behind.
    static func inLists(_ values: [SQLiteValue]) -> [(placeholders: String, values: [SQLiteValue])] {
        stride(from: 0, to: values.count, by: 512).map { start in
            let chunk = values[start..<min(start + 512, values.count)]
            var slots = 1
            while slots < chunk.count { slots *= 2 }
            return (Array(repeating: "?", count: slots).joined(separator: ","), Array(chunk) + Array(repeating: .null, count: slots - chunk.count))
        }
    }
}
