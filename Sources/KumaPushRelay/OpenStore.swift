import Common
import Queue

/// Opens the store the settings name (applying migrations): PostgreSQL when DATABASE_URL is set, else the SQLite
/// file at DATABASE_PATH. Fails with the right exit code.
func openStore(_ settings: Settings, clock: some WallClock = SystemClock()) throws -> any RelayStore {
    do {
        if let url = settings.databaseURL {
            return try PostgresStore(url: url, now: clock.nowMillis())
        }
        return try SQLiteStore(
            path: settings.databasePath,
            options: .init(
                synchronousFull: settings.sync == .full,
                monitorRetention: settings.tombstoneRetention,
                walTruncateInterval: settings.walTruncateInterval),
            now: clock.nowMillis())
    } catch {
        throw StartupError.openingDatabase(settings, error)
    }
}
