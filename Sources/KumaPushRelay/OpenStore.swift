import Common
import Queue

/// Opens the database named by DATABASE_PATH (applying migrations), or fails with the right exit code.
func openStore(_ settings: Settings, clock: some WallClock = SystemClock()) throws -> SQLiteStore {
    do {
        return try SQLiteStore(path: settings.databasePath,
                               options: .init(synchronousFull: settings.sync == .full, monitorRetention: settings.tombstoneRetention),
                               now: clock.nowMillis())
    } catch {
        throw StartupError.openingDatabase(settings.databasePath, error)
    }
}
