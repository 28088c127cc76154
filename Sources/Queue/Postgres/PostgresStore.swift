import Common
import PostgresDriver
import Synchronization

/// `RelayStore` on PostgreSQL 15+, for several ingest and deliver processes on several hosts sharing one
/// database. Same semantics as `SQLiteStore`: durable before acknowledged (each call commits before it returns),
/// per-device order, leases fenced by the attempt number.
///
/// Two connections per store, each confined by a `Mutex` (a `PGconn` must not be used by two threads at once):
/// one for writes, one for reads, so a webhook's tombstone lookup or `/health` does not queue behind a group commit.
/// An ingest process opens a second write connection the first time two group commits overlap
/// (`concurrentEnqueues`), so one batch executes while the other's commit waits for the server's disk; a process
/// that is scraped (or runs `stats`) opens one more for `stats()`'s full counts, as `SQLiteStore` does.
/// All reconnect with backoff after the server went away (`PostgresLink`); meanwhile calls fail with `.unavailable`.
///
/// Every session sets `lock_timeout` and `idle_in_transaction_session_timeout` (`Options`): a frozen or cut-off
/// host holds the device rows it locked for seconds, and a batch waiting for them fails within the lock timeout
/// (503) instead of holding its other devices for the whole `statement_timeout` (SPEC §4 "No single point of trouble").
public final class PostgresStore: Sendable {
    public struct Options: Sendable {
        /// The server cancels any statement running longer (`statement_timeout`).
        public var statementTimeout: Duration = .seconds(30)
        /// How long opening a connection may take, per host of the list (libpq `connect_timeout`, whole seconds,
        /// at least 2): a host that vanished silently costs this much at each reconnect that tries it.
        public var connectTimeout: Duration = .seconds(2)
        /// A monitor not heard of for this long no longer counts towards a device's badge (TOMBSTONE_RETENTION).
        public var monitorRetention: Duration = .seconds(30 * 86_400)
        /// A statement gives up waiting for another session's lock after this long (`lock_timeout`, PG_LOCK_TIMEOUT).
        public var lockTimeout: Duration = .seconds(5)
        /// The server ends a session idle inside a transaction this long, releasing its locks
        /// (`idle_in_transaction_session_timeout`, PG_IDLE_IN_TRANSACTION_TIMEOUT).
        public var idleInTransactionTimeout: Duration = .seconds(10)
        /// Where an upgrade of the schema says that it waits for locks (migrations run without the timeouts above).
        public var logger: Logger?

        public init(
            statementTimeout: Duration = .seconds(30), connectTimeout: Duration = .seconds(2),
            monitorRetention: Duration = .seconds(30 * 86_400), lockTimeout: Duration = .seconds(5),
            idleInTransactionTimeout: Duration = .seconds(10), logger: Logger? = nil
        ) {
            self.statementTimeout = statementTimeout
            self.connectTimeout = connectTimeout
            self.monitorRetention = monitorRetention
            self.lockTimeout = lockTimeout
            self.idleInTransactionTimeout = idleInTransactionTimeout
            self.logger = logger
        }

        var connection: PGConnection.Options {
            PGConnection.Options(
                statementTimeout: statementTimeout, lockTimeout: lockTimeout, idleInTransactionTimeout: idleInTransactionTimeout,
                connectTimeoutSeconds: max(2, Int(connectTimeout.wholeMilliseconds / 1000)))
        }
    }

    let options: Options
    private let writer: Mutex<PostgresLink>
    /// The second connection enqueues run on while `writer` is busy; opened when first needed.
    private let secondWriter = Mutex(SecondWriter())
    private let reader: Mutex<PostgresLink>
    /// `stats()` only, opened on its first use: a scrape's full counts (up to a million jobs) hold this connection,
    /// never `reader`, which answers the app's device calls, `/health`, Test polls and the deliverer's checks
    /// (SPEC §2.3).
    private let statsReader = Mutex<PostgresLink?>(nil)
    /// The LISTEN connection on its own thread, started by the first `changeCounter()` or `wakeOnChanges`: only
    /// deliverers listen, so ingest processes hold two connections (three once their group commits overlap,
    /// `secondWriter`).
    private let listener = Mutex<ListenerSlot>(ListenerSlot())
    private let url: String
    /// Raised by a connection whose server turned read-only: every connection of the store then finds the primary.
    private let failover = FailoverSignal()
    /// The database's schema version as opened: this release's, or a newer release's that keeps it working.
    public let databaseSchemaVersion: Int

    /// Connects to `url` (a libpq URI or key=value string) and applies pending migrations.
    public init(url: String, options: Options = Options(), now: Int64) throws(StoreError) {
        self.options = options
        self.url = url
        do {
            let writeLink = try PostgresLink(conninfo: url, options: options.connection, failover: failover)
            databaseSchemaVersion = try PostgresMigrations.apply(
                on: try writeLink.connected(), now: now, logger: options.logger,
                tableLockWait: PostgresMigrations.tableLockWait(sessionLockTimeout: options.lockTimeout))
            let readLink = try PostgresLink(conninfo: url, options: options.connection, failover: failover)
            writer = Mutex(writeLink)
            reader = Mutex(readLink)
        } catch {
            throw Self.storeError(error)
        }
    }

    /// Whether the database at `url` holds a relay's schema (its `schema_migrations` ledger), without creating or
    /// migrating anything: the admin commands, which never create a database, ask before they open the store.
    public static func holdsRelaySchema(url: String, options: Options = Options()) throws(StoreError) -> Bool {
        do {
            let link = try PostgresLink(conninfo: url, options: options.connection, failover: FailoverSignal())
            return try PostgresMigrationDialect(connection: link.connected(), logger: nil).tableNames().contains("schema_migrations")
        } catch {
            throw storeError(error)
        }
    }

    /// Whether `location` names a PostgreSQL database (`DATABASE_URL`) rather than a file.
    public static func isDatabaseURL(_ location: String) -> Bool {
        location.hasPrefix("postgres://") || location.hasPrefix("postgresql://") || location.contains("=")
    }

    /// The linked libpq version, e.g. `15.18`.
    public static var libraryVersion: String { PGConnection.libraryVersion }

    /// The schema version this binary migrates to.
    public static var schemaVersion: Int { PostgresMigrations.latestVersion }

    /// Every migration this binary applies, by version: SQLite's numbers, without those only SQLite has.
    public static var migrationVersions: [Int] { PostgresMigrations.all.map(\.version) }

    /// Runs one or more statements outside a transaction on the read connection (reads are single statements:
    /// each sees a consistent snapshot of its own). libpq notices a connection the server dropped (a restart, a
    /// failover) only when a statement fails on it; a read is harmless to repeat, so it runs once more, on a new
    /// connection, rather than answer 503 while the database is back.
    func read<T: Sendable>(_ body: (PGConnection) throws -> T) throws(StoreError) -> T {
        try StoreError.translating(Self.storeError) {
            try reader.withLock { link in
                do {
                    return try body(try link.connected())
                } catch let error as PGError where error.connectionBroken {
                    return try body(try link.connected())
                }
            }
        }
    }

    /// Round trips on the write connection so far (tests count what a call costs).
    var writerRoundTrips: Int { writer.withLock { $0.roundTrips } }

    /// Connections the write link has opened so far (tests count reconnections).
    var writerConnectionsOpened: Int { writer.withLock { $0.connectionsOpened } }

    /// Tests only: from now on, the SQL of every statement on the write connection, in order (`writerStatementLog`).
    func keepWriterStatementLog() { writer.withLock { $0.keepStatementLog() } }
    var writerStatementLog: [String] { writer.withLock { $0.statementLog } }

    /// Runs `body` in a transaction on the write connection. A transaction PostgreSQL aborted to break a deadlock
    /// runs again (a few times), since nothing of it was committed; so does one that found the connection dropped
    /// before its COMMIT was sent (the server rolls back a transaction whose connection is gone). A connection
    /// lost once the COMMIT was sent is not retried: the caller answers 503, since the transaction may or may not
    /// have committed.
    ///
    /// BEGIN travels with the transaction's first statement, and the statements whose answers `body` does not
    /// read with the next one or with the COMMIT (`PGConnection.runDeferred`): a trickle's transaction is two
    /// round trips, not one per statement.
    func write<T: Sendable>(_ body: (PGConnection) throws -> T) throws(StoreError) -> T {
        try StoreError.translating(Self.storeError) { try writer.withLock { link in try Self.transaction(on: link, body) } }
    }

    /// `write` for an enqueue: on the write connection when it is free, otherwise on the second one (opened now if
    /// need be). Two ingest writer threads then overlap their transactions; if the second connection cannot be
    /// opened, the enqueue waits for the first.
    func writeEnqueue<T: Sendable>(_ body: (PGConnection) throws -> T) throws(StoreError) -> T {
        try StoreError.translating(Self.storeError) {
            if let result = try writer.withLockIfAvailable({ link in try Self.transaction(on: link, body) }) { return result }
            let onSecond = try secondWriter.withLockIfAvailable { second -> T? in
                guard let link = second.usable(url, options.connection, failover) else { return nil }
                return try Self.transaction(on: link, body)
            }
            if let onSecond, let result = onSecond { return result }
            return try writer.withLock { link in try Self.transaction(on: link, body) }
        }
    }

    /// The second write connection, and when to try opening it again after that failed.
    private struct SecondWriter {
        var link: PostgresLink?
        var retryAt = ContinuousClock.now

        /// The link, opened now if it is time; nil while it cannot be had (the enqueue then waits for the first
        /// connection rather than fail): not yet opened again after a failure, or reconnecting with backoff.
        mutating func usable(_ url: String, _ options: PGConnection.Options, _ failover: FailoverSignal) -> PostgresLink? {
            if let link { return link.isBackingOff ? nil : link }
            guard ContinuousClock.now >= retryAt else { return nil }
            link = try? PostgresLink(conninfo: url, options: options, failover: failover)
            if link == nil { retryAt = .now + .seconds(5) }
            return link
        }
    }

    /// Runs `body` between BEGIN and COMMIT on `link`'s connection, again after a transient failure (see `write`).
    private static func transaction<T: Sendable>(on link: PostgresLink, _ body: (PGConnection) throws -> T) throws -> T {
        var attempt = 0
        while true {
            attempt += 1
            var committing = false
            do {
                let connection = try link.connected()
                connection.beginDeferred()
                do {
                    let result = try body(connection)
                    committing = true
                    try connection.commit()
                    return result
                } catch {
                    connection.rollback()
                    throw error
                }
            } catch let error as PGError
                where attempt < 5
                && (error.isTransient || error.connectionBroken && (!committing || error.rolledBackWithSession) && attempt == 1)
            {
                // A session the server ended for idling in the transaction (this host was frozen between two round
                // trips) rolled it back, COMMIT or not: it runs once more on a new connection.
                continue
            }
        }
    }

    /// Runs one statement on the write connection, committed on its own.
    func writeStatement<T: Sendable>(_ body: (PGConnection) throws -> T) throws(StoreError) -> T {
        try StoreError.translating(Self.storeError) { try writer.withLock { link in try body(try link.connected()) } }
    }

    /// Wakes deliverers (`changeCounter`) when the transaction `db` is in commits: NOTIFY is transactional, so a
    /// deliverer that hears it sees the rows, and one that would not see them never hears it. Sent with the COMMIT.
    static func notifyDeliverers(_ db: PGConnection) {
        db.runDeferred(notify, prepare: false)
    }

    private static let notify = "NOTIFY \(PostgresListener.channel)"

    /// `notifyDeliverers` for a change already committed (single statements that run outside a transaction). A
    /// failure is ignored: the change was committed, and deliverers look at the queue every second anyway.
    func signalChange() {
        _ = try? writeStatement { db in try db.execute(Self.notify) }
    }

    static func storeError(_ error: any Error) -> StoreError {
        switch error {
        case let error as StoreError: return error
        case let error as PGError where error.isEnvironmental: return StoreError(.unavailable, error.description)
        default: return StoreError(.failed, "\(error)")
        }
    }

    /// Counts NOTIFYs heard on a dedicated LISTEN connection, read and counted by its own thread
    /// (`PostgresListenerThread`): no round trip, no system call. 0 until that thread first connects.
    public func changeCounter() throws(StoreError) -> Int64 {
        try listenerThread().changes()
    }

    /// `wake` is called by the LISTEN connection's thread as soon as a NOTIFY arrives (and once after each reconnect),
    /// until `stopWakingOnChanges()`. Without a thread (the process is out of file descriptors) nothing wakes the
    /// engine: it finds work at its next poll, and `changeCounter()` reports the failure.
    public func wakeOnChanges(_ wake: @escaping @Sendable () -> Void) {
        (try? listenerThread())?.setWake(wake)
    }

    /// Ends the LISTEN connection's thread and closes its connection, waiting for that at most
    /// `PostgresListenerThread.stopWait` (a connect under way finishes first; a frozen server may never answer its
    /// LISTEN). A later `changeCounter()` starts another thread, counting on from where this one stopped.
    public func stopWakingOnChanges() {
        let stopping = listener.withLock { listener -> PostgresListenerThread? in
            guard let thread = listener.thread else { return nil }
            listener.thread = nil
            listener.stopping = thread
            return thread
        }
        guard let stopping else { return }
        stopping.setWake(nil)
        stopping.stop()
        // Read after the thread ended, so that a NOTIFY it counted while stopping is not counted again from below.
        listener.withLock { $0.lastChanges = max($0.lastChanges, stopping.lastChanges) }
    }

    /// Tests: whether a LISTEN thread of this store runs (one being stopped included).
    package var isListening: Bool {
        listener.withLock { ($0.thread?.isRunning ?? false) || ($0.stopping?.isRunning ?? false) }
    }

    private func listenerThread() throws(StoreError) -> PostgresListenerThread {
        try listener.withLock { (listener) throws(StoreError) -> PostgresListenerThread in
            if let thread = listener.thread { return thread }
            let thread = try PostgresListenerThread(
                conninfo: url, options: options.connection, failover: failover, startingAt: listener.lastChanges)
            listener.thread = thread
            return thread
        }
    }

    deinit {
        // Without waiting: the thread holds none of the store, and ends by itself once asked.
        listener.withLock { $0.thread }?.requestStop()
    }

    /// Runs `body` on the stats connection, opening it first if need be; once more on a new connection when the
    /// server dropped the old one (a count is harmless to repeat), as `read` does.
    func withStatsConnection<T: Sendable>(_ body: (PGConnection) throws -> T) throws(StoreError) -> T {
        try StoreError.translating(Self.storeError) {
            try statsReader.withLock { opened in
                let link = opened ?? PostgresLink(connectingLater: url, options: options.connection, failover: failover)
                opened = link
                do {
                    return try body(try link.connected())
                } catch let error as PGError where error.connectionBroken && !link.isBackingOff {
                    return try body(try link.connected())
                }
            }
        }
    }
}

/// The store's LISTEN thread, the one being stopped (until it has ended: tests ask whether it still runs), and
/// where a thread started after `stopWakingOnChanges` counts on from.
private struct ListenerSlot {
    var thread: PostgresListenerThread?
    var stopping: PostgresListenerThread?
    var lastChanges: Int64 = 0
}
