import Allocator
import Common
import HTTP2
import Ingest
import Queue

/// The relay's version; bumped with each release in CHANGELOG.md.
let relayVersion = "0.2.0-dev"

enum VersionCommand: Command {
    static let name = "version"
    static let summary = "print the version, the linked C library versions and the allocator in use"
    static let help = "Usage: kumapush-relay version"

    static func run(settings: Settings, arguments: [String]) throws -> Int32 {
        try OptionParser(arguments).finish()
        print(
            """
            kumapush-relay \(relayVersion) (database schema \(SQLiteStore.schemaVersion))
              SQLite        \(SQLiteStore.libraryVersion)
              libpq         \(PostgresStore.libraryVersion)
              OpenSSL       \(Crypto.openSSLVersion)
              libmicrohttpd \(HTTPServer.libraryVersion)
              libnghttp2    \(HTTP2Library.version)
              malloc        \(Allocator.description)
            """)
        return ExitCode.ok
    }
}
