/// A connection to PostgreSQL that comes back after it is lost: a failed statement on a broken connection drops it,
/// and the next use reconnects — at once the first time, then no more often than a backoff that doubles from
/// 100 ms to 5 s while the server stays unreachable. Between attempts, uses fail at once (the caller answers 503)
/// instead of each waiting out `connect_timeout`.
///
/// Not thread-safe: `PostgresStore` keeps each link inside a `Mutex`.
final class PostgresLink: @unchecked Sendable {
    // @unchecked Sendable: reached only inside the `Mutex` of `PostgresStore` that holds it, so by one thread at a
    // time; Sendable so that a transaction helper may take it as an argument from inside that lock.
    private let conninfo: String
    private let options: PGConnection.Options
    private var connection: PGConnection?
    private var nextAttempt = ContinuousClock.now
    private var backoff: Duration = .zero
    private var lastFailure = ""

    /// Connects once, so that a wrong DATABASE_URL fails at start-up.
    init(conninfo: String, options: PGConnection.Options) throws {
        self.conninfo = conninfo
        self.options = options
        connection = try PGConnection(conninfo: conninfo, options: options)
    }

    /// Connects on first use (`connected()`), with the backoff from the first failure on: for a connection opened
    /// after start-up, whose first attempt must not be retried on every call while the server is unreachable.
    init(connectingLater conninfo: String, options: PGConnection.Options) {
        self.conninfo = conninfo
        self.options = options
    }

    /// Round trips on the current connection (tests count them); 0 when there is none.
    var roundTrips: Int { connection?.roundTrips ?? 0 }

    /// Tests only: keep, from now on, the SQL of every statement on the current connection (`statementLog`).
    func keepStatementLog() { connection?.keepStatementLog() }
    var statementLog: [String] { connection?.statementLog ?? [] }

    /// The connection broke and the backoff has not passed: `connected()` would fail at once.
    var isBackingOff: Bool { (connection == nil || connection?.isBroken == true) && ContinuousClock.now < nextAttempt }

    /// A live connection, reconnecting first if the last one broke. A connection that breaks while in use is
    /// noticed here on the next call (libpq marks it bad) and replaced.
    func connected() throws -> PGConnection {
        if let connection, !connection.isBroken { return connection }
        connection = nil
        guard ContinuousClock.now >= nextAttempt else {
            throw PGError(sqlstate: "", message: "database unreachable, reconnecting (last error: \(lastFailure))", connectionBroken: true)
        }
        do {
            let fresh = try PGConnection(conninfo: conninfo, options: options)
            connection = fresh
            backoff = .zero
            return fresh
        } catch {
            backoff = min(max(backoff * 2, .milliseconds(100)), .seconds(5))
            nextAttempt = ContinuousClock.now + backoff
            lastFailure = (error as? PGError)?.message ?? "\(error)"
            throw error
        }
    }
}
