import Common
import Foundation
import Queue

/// Opens the store for an admin command (`stats`, `replay`, `device`, `dead-letters`). Unlike the services, an admin
/// command never creates a database (SPEC §5): run in the wrong directory, or without the units' `--env-file`, it
/// would otherwise report an empty relay from a new empty file. A missing SQLite file is exit 2 naming the setting.
func openAdminStore(_ settings: Settings, clock: some WallClock = SystemClock()) throws -> any RelayStore & SupportQueries {
    if settings.databaseURL == nil, !FileManager.default.fileExists(atPath: settings.databasePath) {
        throw ConfigurationError(
            variable: "DATABASE_PATH",
            message:
                "no database at \(settings.databasePath) (admin commands never create one): "
                + "name the relay's database with --database-path, as its units do, or --env-file with its DATABASE_URL")
    }
    // On PostgreSQL too: opening the store would create the relay's tables in whatever database the URL names, and
    // report an empty relay there.
    if let url = settings.databaseURL {
        let holds: Bool
        do {
            holds = try PostgresStore.holdsRelaySchema(url: url, options: postgresOptions(settings))
        } catch {
            throw StartupError.openingDatabase(settings, error)
        }
        guard holds else {
            throw ConfigurationError(
                variable: "DATABASE_URL",
                message:
                    "no relay schema in that database (admin commands never create one): name the relay's database, "
                    + "or run `kumapush-relay migrate` for a new one")
        }
    }
    guard let store = try openStore(settings, clock: clock) as? any RelayStore & SupportQueries else {
        preconditionFailure("every store answers the support queries")
    }
    return store
}
