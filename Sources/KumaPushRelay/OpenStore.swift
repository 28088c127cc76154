import Common
import Queue

/// Opens the store the settings name (applying migrations): PostgreSQL when DATABASE_URL is set, else the SQLite
/// file at DATABASE_PATH. Fails with the right exit code. An upgrade of the SQLite schema is announced on `logger`
/// (a process-wide one by default): some take seconds.
func openStore(_ settings: Settings, clock: some WallClock = SystemClock(), logger: Logger? = nil) throws -> any RelayStore {
    do {
        if let url = settings.databaseURL {
            return try PostgresStore(
                url: url,
                options: .init(
                    monitorRetention: settings.tombstoneRetention, lockTimeout: settings.pgLockTimeout,
                    idleInTransactionTimeout: settings.pgIdleInTransactionTimeout,
                    logger: logger ?? Logger(label: "relay", settings: settings)),
                now: clock.nowMillis())
        }
        return try SQLiteStore(
            path: settings.databasePath,
            options: .init(
                synchronousFull: settings.sync == .full,
                monitorRetention: settings.tombstoneRetention,
                walTruncateInterval: settings.walTruncateInterval,
                logger: logger ?? Logger(label: "relay", settings: settings)),
            now: clock.nowMillis())
    } catch {
        throw StartupError.openingDatabase(settings, error)
    }
}
