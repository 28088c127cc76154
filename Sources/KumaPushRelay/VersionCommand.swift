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
              malloc        \(allocator)
            """)
        return ExitCode.ok
    }
}

/// The allocator this process's `malloc` resolved to ("jemalloc 5.3.0-…" as linked; a sanitizer build's own, or glibc
/// under a loader that bypassed the link), with the options jemalloc was built with.
private var allocator: String {
    let name = withUnsafeTemporaryAllocation(of: CChar.self, capacity: 128) { buffer in
        String(cString: kumapush_allocator(buffer.baseAddress, UInt(buffer.count)))
    }
    return name.hasPrefix("jemalloc") ? "\(name) (\(String(cString: kumapush_allocator_options())))" : name
}
