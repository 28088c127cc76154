import Common
import Queue

/// Opens the store the settings name (applying migrations): PostgreSQL when DATABASE_URL is set, else the SQLite
/// file at DATABASE_PATH. Fails with the right exit code. An upgrade of the SQLite schema is announced on `logger`
/// (a process-wide one by default): some take seconds. `checkpointsYield`: SQLite's WAL checkpoint thread runs at a
/// lower priority (`SQLiteStore.Options.checkpointsYield`), for `ingest`.
func openStore(
    _ settings: Settings, clock: some WallClock = SystemClock(), logger: Logger? = nil, checkpointsYield: Bool = false
) throws -> any RelayStore {
    do {
        if let url = settings.databaseURL {
            return try PostgresStore(url: url, options: postgresOptions(settings, logger: logger), now: clock.nowMillis())
        }
        return try SQLiteStore(
            path: settings.databasePath,
            options: .init(
                synchronousFull: settings.sync == .full,
                monitorRetention: settings.tombstoneRetention,
                walTruncateInterval: settings.walTruncateInterval,
                logger: logger ?? Logger(label: "relay", settings: settings), checkpointsYield: checkpointsYield),
            now: clock.nowMillis())
    } catch {
        throw StartupError.openingDatabase(settings, error)
    }
}

/// PostgreSQL's options as the settings give them: every command that opens PostgreSQL (the relay's processes,
/// `migrate-store`'s target) waits for locks and reports a schema upgrade alike.
func postgresOptions(_ settings: Settings, logger: Logger? = nil) -> PostgresStore.Options {
    .init(
        monitorRetention: settings.tombstoneRetention, lockTimeout: settings.pgLockTimeout,
        idleInTransactionTimeout: settings.pgIdleInTransactionTimeout, logger: logger ?? Logger(label: "relay", settings: settings))
}
