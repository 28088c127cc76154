import Foundation
import Synchronization

/// A real PostgreSQL server for the tests, started on first use and stopped when the test process exits: one
/// cluster per test run in a temporary directory, listening only on a Unix socket there, one fresh database per
/// test. Nothing assumes a server already running.
///
/// PostgreSQL refuses to run as root: as root the cluster belongs to the `postgres` user (which the Debian package
/// creates) and its commands run through `runuser`. `fsync=off`: the tests check behaviour, not power-loss durability.
public final class PostgresServer: Sendable {
    /// The server's binaries: `KUMAPUSH_PG_BIN`, else the newest /usr/lib/postgresql/<version>/bin.
    static var binDirectory: String? {
        if let configured = ProcessInfo.processInfo.environment["KUMAPUSH_PG_BIN"] { return configured }
        let versions = (try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? []
        return versions.compactMap(Int.init).max().map { "/usr/lib/postgresql/\($0)/bin" }
    }

    /// The server of this test process, started on first use.
    public static func shared() throws -> PostgresServer {
        try instance.withLock { instance in
            if let instance { return instance }
            let server = try PostgresServer()
            instance = server
            atexit { PostgresServer.stopShared() }
            return server
        }
    }

    private static let instance = Mutex<PostgresServer?>(nil)
    private static let databaseCounter = Atomic<Int>(0)

    /// Holds the socket, the cluster's data directory and its log.
    public let directory: String
    private let runAsPostgres: Bool
    private let pgCtl: String

    private init() throws {
        guard let bin = Self.binDirectory else {
            throw ServerError("no PostgreSQL server found in /usr/lib/postgresql (apt-get install postgresql, or set KUMAPUSH_PG_BIN)")
        }
        runAsPostgres = getuid() == 0
        pgCtl = bin + "/pg_ctl"
        // A short path: a Unix socket path must fit in 107 bytes.
        directory = "/tmp/kumapush-pg-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        if runAsPostgres { try Self.run("/bin/chown", ["postgres:postgres", directory]) }
        try command(
            bin + "/initdb",
            [
                "-D", directory + "/data", "--auth=trust", "--no-sync", "-U", "postgres",
                "--encoding=UTF8", "--locale=C"
            ])
        try command(
            pgCtl,
            [
                "-D", directory + "/data", "-w", "-l", directory + "/server.log", "-o",
                "-k \(directory) -c listen_addresses='' -c fsync=off -c full_page_writes=off -c max_connections=300",
                "start"
            ])
    }

    /// A fresh, empty database: its libpq connection string (key=value).
    /// A failure carries the end of the server's log: the log goes with the server's directory when the test process
    /// exits, and a connection the server closed unexpectedly (seen once in CI) says nothing of why by itself.
    public func createDatabase() throws -> String {
        let name = "test_\(Self.databaseCounter.add(1, ordering: .relaxed).newValue)"
        do {
            try RawPostgres(conninfo(database: "postgres")).execute("CREATE DATABASE \(name)")
        } catch {
            throw ServerError("CREATE DATABASE \(name): \(error)\nthe test server's log ends:\n\(logTail(lines: 40))")
        }
        return conninfo(database: name)
    }

    /// The last `lines` lines of the server's log.
    public func logTail(lines: Int) -> String {
        let log = (try? String(contentsOfFile: directory + "/server.log", encoding: .utf8)) ?? "(no log)"
        return log.split(separator: "\n", omittingEmptySubsequences: false).suffix(lines).joined(separator: "\n")
    }

    public func conninfo(database: String) -> String {
        "host=\(directory) user=postgres dbname=\(database)"
    }

    /// Stops the server immediately (its databases are throwaway) and removes its directory. Lines of the log that
    /// tell of a server process dying or the server resetting are printed first: every test connected at that moment
    /// failed with "server closed the connection unexpectedly", and the log is the only witness of why.
    public func stop() {
        let log = (try? String(contentsOfFile: directory + "/server.log", encoding: .utf8)) ?? ""
        let crashes = log.split(separator: "\n").filter { line in
            Self.crashWords.contains { line.contains($0) }
        }
        if !crashes.isEmpty {
            FileHandle.standardError.write(
                Data(("the test PostgreSQL server's log tells of a crash:\n" + crashes.joined(separator: "\n") + "\n").utf8))
        }
        try? command(pgCtl, ["-D", directory + "/data", "-m", "immediate", "stop"])
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// What PostgreSQL logs when a server process dies or the postmaster resets every connection.
    private static let crashWords = ["terminated by signal", "was terminated by", "PANIC", "all server processes terminated", "out of memory"]

    private static func stopShared() {
        instance.withLock { $0 }?.stop()
    }

    /// Runs a PostgreSQL command as the cluster's owner.
    private func command(_ path: String, _ arguments: [String]) throws {
        if runAsPostgres {
            try Self.run("/usr/sbin/runuser", ["-u", "postgres", "--", path] + arguments)
        } else {
            try Self.run(path, arguments)
        }
    }

    /// posix_spawn and waitpid rather than Foundation's Process, whose exit monitoring needs threads that parallel
    /// tests may all be holding. Output goes to a file, not a pipe: the server `pg_ctl start` leaves running
    /// inherits it and would keep a pipe open for ever.
    private static func run(_ path: String, _ arguments: [String]) throws {
        let outputPath = "/tmp/kumapush-pg-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).out"
        defer { unlink(outputPath) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 1, outputPath, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        let argv = ([path] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, path, &actions, nil, argv, environ)
        guard spawned == 0 else { throw ServerError("cannot start \(path): \(String(cString: strerror(spawned)))") }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        // WIFEXITED && WEXITSTATUS == 0, spelled out: the C macros do not import into Swift.
        guard status & 0x7f == 0 && (status >> 8) & 0xff == 0 else {
            let text = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
            throw ServerError("\(path) \(arguments.joined(separator: " ")) failed (status \(status)): \(text)")
        }
    }

    struct ServerError: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }
}
