import PostgresDriver

/// The connection a deliverer hears about new work on: it LISTENs to `kumapush_jobs`, which writers NOTIFY in
/// the transaction that gives a deliverer work (PostgreSQL delivers it at commit, so whoever hears it also sees the
/// rows). `changes` counts what arrived; reading it drains the socket without a round trip, and
/// `waitForNotification` sleeps until there is something to drain. After a reconnect it moves once by itself:
/// notifications sent while the connection was down are lost, so the deliverer must look.
///
/// Must stay a direct connection: a pooler in transaction mode (pgbouncer) does not carry LISTEN across
/// transactions. Not thread-safe: it lives on `PostgresListenerThread`'s thread, which alone uses it.
final class PostgresListener {
    static let channel = "kumapush_jobs"

    private let link: PostgresLink
    private var listening: PGConnection?
    private(set) var changes: Int64 = 0

    /// Connects on the first `poll()`: opened by a deliverer's loop after start-up, perhaps while the server is
    /// failing over, its attempts keep the link's backoff from the first one on (a listener that failed to open
    /// was opened again on every poll, a connection attempt every few milliseconds on the delivery thread).
    init(conninfo: String, options: PGConnection.Options, failover: FailoverSignal? = nil) {
        link = PostgresLink(connectingLater: conninfo, options: options, failover: failover)
    }

    /// The last attempt failed and the backoff has not passed: `poll()` fails at once, without connecting.
    var isBackingOff: Bool { link.isBackingOff }

    /// When the next attempt to connect may be made, while `isBackingOff`.
    var reconnectAt: ContinuousClock.Instant { link.nextAttempt }

    /// Drains what has arrived and returns the count so far. Throws while the server cannot be reached.
    func poll() throws -> Int64 {
        let connection = try link.connected()
        if connection !== listening {
            try connection.execute("LISTEN \(Self.channel)")
            listening = connection
            changes += 1
        }
        changes += Int64(try connection.drainNotifications())
        return changes
    }

    /// Sleeps until the server sends something (a NOTIFY: `poll()` then counts it), `interrupt` is raised, or
    /// `timeout` passes. At once when not connected: `poll()` connects.
    func waitForNotification(orInterrupt interrupt: PGInterrupt, timeout: Duration) {
        guard let listening, !listening.isBroken else { return }
        _ = listening.waitForInput(orInterrupt: interrupt, timeout: timeout)
    }
}
