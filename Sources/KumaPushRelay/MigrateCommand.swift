import Common
import Queue

/// `migrate`: creates the database, or brings its schema up to this release, and exits. The services migrate by
/// themselves at start; this is for doing it first, on purpose (an upgrade's first step, or a new relay), and the
/// one admin command that creates a database.
enum MigrateCommand: Command {
    static let name = "migrate"
    static let summary = "create the database or upgrade its schema to this release, then exit"
    static let help = """
        Usage: kumapush-relay migrate

        Creates the SQLite file at DATABASE_PATH (or the tables in DATABASE_URL's database) when there is none, and
        applies every migration this release has. Safe to run again: it then does nothing. Prints the database's
        schema version; on a database a newer release has migrated (a rolling upgrade under way) it changes nothing
        and says so, if that release's migrations keep this one working, and otherwise exits 2.
        """

    static func run(settings: Settings, arguments: [String]) throws -> Int32 {
        try OptionParser(arguments).finish()
        let found = try openStore(settings).databaseSchemaVersion
        let release = settings.databaseURL == nil ? SQLiteStore.schemaVersion : PostgresStore.schemaVersion
        if found > release {
            // A newer release migrated it, and its migrations keep this one working (else opening it failed).
            print("database at schema version \(found), newer than this release's \(release), which keeps working beside it: finish the upgrade")
        } else {
            print("database at schema version \(found)")
        }
        return ExitCode.ok
    }
}
