internal import CSQLite
internal import CSQLiteWALBuffer
import Foundation

/// One SQLite connection. Owns its `sqlite3*` (closed in `deinit`) and a cache of prepared statements.
///
/// Opened in multi-thread mode (`SQLITE_OPEN_NOMUTEX`): SQLite does no locking of its own, so a connection must be
/// used by one thread at a time. `SQLiteStore` guarantees that by keeping it inside a `Mutex`.
package final class SQLiteConnection {
    package struct Options {
        package var busyTimeoutMillis: Int32
        package var synchronousFull: Bool
        /// Page cache in KiB. The claim and promote statements walk indexes of every queued job: with SQLite's
        /// default 2 MiB they miss the cache at a million jobs and the claim rate halves (measured by
        /// `make bench`); 16 MiB keeps the hot index pages in memory.
        package var cacheKiB: Int

        package init(busyTimeoutMillis: Int32 = 5_000, synchronousFull: Bool = false, cacheKiB: Int = 16_384) {
            self.busyTimeoutMillis = busyTimeoutMillis
            self.synchronousFull = synchronousFull
            self.cacheKiB = cacheKiB
        }
    }

    private let handle: OpaquePointer
    private let busyTimeoutMillis: Int32
    private var statements: [String: SQLiteStatement] = [:]
    /// Statements written with PostgreSQL's placeholders (`statement(portable:)`), by that text: kept apart, so a
    /// text both spellings could read is never taken unrewritten from the other cache.
    private var portableStatements: [String: SQLiteStatement] = [:]
    /// Kept alive here for as long as the WAL hook that points at it is installed (the connection's life).
    private var walCommitHook: WALCommitHook?

    /// Process-wide settings SQLite takes only before it initializes: run once, before the first connection opens.
    /// Swift runs a static property's initializer once, thread-safely.
    private static let configured: Void = {
        // SQLITE_MISUSE means something opened a database first; the setting is an optimisation, so that is no error.
        _ = CSQLite_disableMemoryStatistics()
    }()

    /// Whether the `kumapush-wal` VFS is there to open connections with: the unix VFS, with the WAL frames a COMMIT
    /// writes sent in one call instead of two calls a frame (Sources/CSQLiteWALBuffer). Should
    /// registering fail, connections use the unix VFS itself, which differs only in speed.
    private static let gathersWALWrites: Bool = CSQLiteWALBuffer_register() == SQLITE_OK

    package init(path: String, options: Options) throws {
        Self.configured
        let directory = URL(fileURLWithPath: path).deletingLastPathComponent().path
        try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var db: OpaquePointer?
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX
        let code = sqlite3_open_v2(path, &db, flags, Self.gathersWALWrites ? CSQLiteWALBuffer_name : nil)
        guard code == SQLITE_OK, let db else {
            // "Whether or not an error occurs when it is opened, resources associated with the database connection
            // handle should be released by passing it to sqlite3_close() when it is no longer required."
            // https://www.sqlite.org/c3ref/open.html
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? "out of memory"
            sqlite3_close_v2(db)
            throw SQLiteError(code: code, message: "cannot open \(path): \(message)", sql: nil)
        }
        handle = db
        busyTimeoutMillis = options.busyTimeoutMillis
        sqlite3_extended_result_codes(db, 1)
        sqlite3_busy_timeout(db, options.busyTimeoutMillis)
        // journal_mode=WAL first: it reads the file header, so a file that is not a database fails here, clearly.
        // Switching a new database to WAL needs an exclusive lock and does not wait in the busy handler, so two
        // processes created together (ingest and deliver started by systemd at once) retry it themselves.
        let deadline = ContinuousClock.now + .milliseconds(Int64(options.busyTimeoutMillis))
        while true {
            do {
                try execute("PRAGMA journal_mode = WAL")
                break
            } catch let error as SQLiteError where error.primaryCode == SQLITE_BUSY && ContinuousClock.now < deadline {
                usleep(10_000)
            }
        }
        try execute("PRAGMA foreign_keys = ON")
        // Deleted rows (finished jobs hold notification content) are overwritten on disk, not just unlinked.
        try execute("PRAGMA secure_delete = ON")
        try execute("PRAGMA synchronous = \(options.synchronousFull ? "FULL" : "NORMAL")")
        try execute("PRAGMA cache_size = -\(options.cacheKiB)")
    }

    deinit {
        statements.removeAll()
        sqlite3_close_v2(handle)
    }

    /// Stops this connection firing the schema's triggers; processes with triggers on (another release's, the `sqlite3`
    /// shell) still fire them. Expires the prepared statements, so call it before the hot statements are cached.
    package func disableTriggers() throws {
        let code = CSQLite_setTriggersEnabled(handle, 0)
        guard code == SQLITE_OK else { throw SQLiteError(code: code, message: "cannot turn triggers off", sql: nil) }
    }

    /// Runs `body` waiting up to `millis` for another connection's lock, then puts the configured wait back.
    package func withBusyTimeout<T>(millis: Int32, _ body: () throws -> T) rethrows -> T {
        sqlite3_busy_timeout(handle, millis)
        defer { sqlite3_busy_timeout(handle, busyTimeoutMillis) }
        return try body()
    }

    /// Runs one or more SQL statements that take no parameters (schema, pragmas, transaction control).
    package func execute(_ sql: String) throws {
        var errorMessage: UnsafeMutablePointer<CChar>?
        let code = sqlite3_exec(handle, sql, nil, nil, &errorMessage)
        guard code == SQLITE_OK else {
            let message = errorMessage.map { String(cString: $0) } ?? String(cString: sqlite3_errmsg(handle))
            sqlite3_free(errorMessage)
            throw SQLiteError(code: sqlite3_extended_errcode(handle), message: message, sql: sql)
        }
    }

    /// Statements prepared and kept so far (tests check that the cache stays bounded).
    package var preparedStatementCount: Int { statements.count + portableStatements.count }

    /// The cached prepared statement for `sql`, prepared on first use.
    package func statement(_ sql: String) throws -> SQLiteStatement {
        if let cached = statements[sql] { return cached }
        let statement = try SQLiteStatement(connection: handle, sql: sql)
        statements[sql] = statement
        return statement
    }

    /// The cached prepared statement for `sql` written with PostgreSQL's placeholders (`SQLitePlaceholders`),
    /// rewritten once per connection, when first prepared.
    package func statement(portable sql: String) throws -> SQLiteStatement {
        if let cached = portableStatements[sql] { return cached }
        let statement = try SQLiteStatement(connection: handle, sql: SQLitePlaceholders.numbered(sql))
        portableStatements[sql] = statement
        return statement
    }

    /// Runs `body` inside `BEGIN IMMEDIATE … COMMIT`, rolling back if it throws. IMMEDIATE takes the write lock up
    /// front, so two processes never deadlock upgrading read locks; a busy database waits up to the busy timeout.
    package func writeTransaction<T>(_ body: () throws -> T) throws -> T {
        // Prepared once and kept: sqlite3_exec would parse BEGIN and COMMIT again for every transaction, which the
        // delivery profile showed at several percent of its time (then two transactions per loop turn, one since).
        try statement("BEGIN IMMEDIATE").run()
        do {
            let result = try body()
            try commit()
            return result
        } catch {
            try? execute("ROLLBACK")
            throw error
        }
    }

    /// COMMIT, with the WAL frames it writes gathered and sent in one call with the commit frame (the `kumapush-wal`
    /// VFS; frames written at any other time, as a cache spill, go out as they come).
    private func commit() throws {
        CSQLiteWALBuffer_beginCommit(handle)
        do {
            try statement("COMMIT").run()
        } catch {
            _ = CSQLiteWALBuffer_endCommit(handle, 0)
            throw error
        }
        let leftOver = CSQLiteWALBuffer_endCommit(handle, 1)
        guard leftOver == SQLITE_OK else {
            throw SQLiteError(
                code: leftOver, message: "WAL frames were left unwritten after COMMIT (a defect of the kumapush-wal VFS)", sql: "COMMIT")
        }
    }

    /// Replaces SQLite's automatic checkpoint: after each commit `observer` learns how long the WAL is, and says
    /// whether this commit checkpoints in line (the queue's `WALCheckpointer`).
    package func reportWALCommits(to observer: some WALCommitObserver) {
        let hook = WALCommitHook(observer)
        walCommitHook = hook
        // Unmanaged, unretained: the pointer is to the hook `walCommitHook` holds, and the hook can only run inside
        // this connection's own commits, so never after it (and the hook with it) is gone.
        let context = Unmanaged.passUnretained(hook).toOpaque()
        sqlite3_wal_hook(
            handle,
            { context, db, schema, frames in
                guard let context else { return SQLITE_OK }
                if Unmanaged<WALCommitHook>.fromOpaque(context).takeUnretainedValue().observer.committed(frames: Int(frames)) {
                    // What SQLite's own hook does; SQLITE_BUSY (another process is checkpointing) is no error.
                    sqlite3_wal_checkpoint_v2(db, schema, SQLITE_CHECKPOINT_PASSIVE, nil, nil)
                }
                return SQLITE_OK
            }, context)
    }

    /// The value of a single-valued pragma, e.g. `secure_delete` → "1".
    package func pragma(_ name: String) throws -> String {
        try statement("PRAGMA \(name)").rows { $0.text(0) }.first ?? ""
    }

    package static var libraryVersion: String { String(cString: sqlite3_libversion()) }
}

/// Told the WAL's length in pages after each commit of a connection (`SQLiteConnection.reportWALCommits`).
package protocol WALCommitObserver: AnyObject {
    /// Whether this commit checkpoints in line, as SQLite's own hook would.
    func committed(frames: Int) -> Bool
}

/// The observer in a class of known type, which the C hook's context pointer can name.
private final class WALCommitHook {
    let observer: any WALCommitObserver
    init(_ observer: some WALCommitObserver) { self.observer = observer }
}
