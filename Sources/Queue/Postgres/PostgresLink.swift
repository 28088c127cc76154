import PostgresDriver

/// A connection to PostgreSQL that comes back after it is lost: a failed statement on a broken connection drops it,
/// and the next use reconnects — at once the first time, then no more often than a backoff that doubles from
/// 100 ms to 5 s while the server stays unreachable. Between attempts, uses fail at once (the caller answers 503)
/// instead of each waiting out `connect_timeout`. A connection whose server turned read-only is replaced the same
/// way (at most once a second), so that after a failover the relay finds the new primary without a restart.
///
/// Not thread-safe: `PostgresStore` keeps each link inside a `Mutex`.
final class PostgresLink: @unchecked Sendable {
    // @unchecked Sendable: reached only inside the `Mutex` of `PostgresStore` that holds it, so by one thread at a
    // time; Sendable so that a transaction helper may take it as an argument from inside that lock.
    private let conninfo: String
    private let options: PGConnection.Options
    private var connection: PGConnection?
    /// When `connected()` may try again after a failed attempt (in the past when it may now).
    private(set) var nextAttempt = ContinuousClock.now
    private var backoff: Duration = .zero
    private var lastFailure = ""
    private var lastReadOnlyReplacement: ContinuousClock.Instant?
    private let failover: FailoverSignal?
    /// `failover.count` when the current connection was opened.
    private var failoverSeen = 0
    /// The conninfo's servers when it lists several, and the last one a connection of this link lost (broken,
    /// read-only, or left after a failover): reconnects try it last, so a host that vanished silently does not cost
    /// every reconnect its `connect_timeout` while the new primary waits second in the list.
    private let hostOrder: PGHostOrder?
    private var lastLostServer: PGServer?

    /// Connects once, so that a wrong DATABASE_URL fails at start-up. `failover`: shared with the store's other
    /// links, so that one finding its server read-only sends them all to find the primary again.
    init(conninfo: String, options: PGConnection.Options, failover: FailoverSignal? = nil) throws {
        self.conninfo = conninfo
        self.options = options
        self.failover = failover
        hostOrder = PGHostOrder(conninfo: conninfo)
        failoverSeen = failover?.count ?? 0
        connection = try PGConnection(conninfo: conninfo, options: options)
        connectionsOpened = 1
    }

    /// Connects on first use (`connected()`), with the backoff from the first failure on: for a connection opened
    /// after start-up, whose first attempt must not be retried on every call while the server is unreachable.
    init(connectingLater conninfo: String, options: PGConnection.Options, failover: FailoverSignal? = nil) {
        self.conninfo = conninfo
        self.options = options
        self.failover = failover
        hostOrder = PGHostOrder(conninfo: conninfo)
    }

    /// Connections opened so far, the first one included (tests count reconnections).
    private(set) var connectionsOpened = 0

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
        let failovers = failover?.count ?? 0
        if let connection, !connection.isBroken, failovers == failoverSeen { return connection }
        if connection?.refusedWrites == true {
            holdOffAfterReadOnly()
            failover?.raise()
        }
        if let connection { lastLostServer = connection.server }
        connection = nil
        guard ContinuousClock.now >= nextAttempt else {
            throw PGError(sqlstate: "", message: "database unreachable, reconnecting (last error: \(lastFailure))", connectionBroken: true)
        }
        do {
            // Read before connecting: a signal raised while this connect went to the old server still applies to it.
            let failovers = failover?.count ?? 0
            let order = lastLostServer.flatMap { hostOrder?.parameters(tryingLast: $0) } ?? []
            let fresh = try PGConnection(conninfo: conninfo, options: options, hostOrder: order)
            connection = fresh
            failoverSeen = failovers
            connectionsOpened += 1
            backoff = .zero
            return fresh
        } catch {
            backoff = min(max(backoff * 2, .milliseconds(100)), .seconds(5))
            nextAttempt = ContinuousClock.now + backoff
            lastFailure = (error as? PGError)?.message ?? "\(error)"
            throw error
        }
    }

    /// The first replacement of a connection whose server turned read-only happens at once (the transaction that
    /// met it runs again on the new one, so a failover can cost no webhook); another within a second waits out the
    /// rest of that second, so a server that stays read-only is not reconnected to on every statement.
    private func holdOffAfterReadOnly() {
        let now = ContinuousClock.now
        lastFailure = "the server is read-only"
        if let last = lastReadOnlyReplacement, now - last < .seconds(1) {
            // The reconnect a second after the last one counts as the next replacement.
            nextAttempt = max(nextAttempt, last + .seconds(1))
            lastReadOnlyReplacement = last + .seconds(1)
        } else {
            lastReadOnlyReplacement = now
        }
    }
}
