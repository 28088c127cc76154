/// A failed libpq call: the SQLSTATE, PostgreSQL's primary message (never its DETAIL, which can quote row
/// values such as device tokens), the violated constraint if any, and the SQL text. Bound values are never part
/// of it.
package struct PGError: Error, CustomStringConvertible {
    /// Five characters, e.g. `23505`; "" when the failure happened before the server answered (connection lost).
    package let sqlstate: String
    package let message: String
    package let constraint: String?
    package let sql: String?
    /// libpq reports the connection as broken: the statement's outcome is unknown and the connection must be
    /// replaced.
    package let connectionBroken: Bool

    package init(sqlstate: String, message: String, constraint: String? = nil, sql: String? = nil, connectionBroken: Bool = false) {
        self.sqlstate = sqlstate
        self.message = message
        self.constraint = constraint
        self.sql = sql
        self.connectionBroken = connectionBroken
    }

    package var description: String {
        "PostgreSQL error \(sqlstate.isEmpty ? "(no SQLSTATE)" : sqlstate): \(message)" + (sql.map { " in: \($0)" } ?? "")
    }

    package var isUniqueViolation: Bool { sqlstate == "23505" }

    /// `read_only_sql_transaction`: a write reached a server that is read-only (a standby, a fenced old primary).
    package static let readOnlyTransaction = "25006"

    /// `lock_not_available`: a statement waited `lock_timeout` for a lock another session holds (a frozen host's
    /// device rows, a migration). Nothing of the transaction was committed; the caller answers "try again later" at
    /// once rather than run it again here, which would wait as long a second time.
    package static let lockNotAvailable = "55P03"

    /// `idle_in_transaction_session_timeout`: the server ended this session, which sat inside a transaction for
    /// that long (this host was frozen, paused or cut off between two of its round trips). The transaction was
    /// rolled back — a COMMIT sent after it never ran — so it may run again on a new connection.
    package static let idleInTransactionTimeout = "25P03"

    /// Worth running the whole transaction again: a deadlock was broken by aborting us, or a serialization check failed.
    package var isTransient: Bool { sqlstate == "40P01" || sqlstate == "40001" }

    /// The server rolled the transaction back and ended the session before it could commit: safe to run again on a
    /// new connection even when the failure answered the COMMIT.
    package var rolledBackWithSession: Bool { sqlstate == Self.idleInTransactionTimeout }

    /// Failures of the environment rather than of the statement: the server is gone, shutting down, out of
    /// resources, read-only (a standby after a failover), a lock held elsewhere past `lock_timeout`, the session
    /// ended for idling in a transaction, or the statement ran past `statement_timeout`. Callers answer these with
    /// "try again later".
    package var isEnvironmental: Bool {
        if connectionBroken || sqlstate.isEmpty { return true }
        let environmentalClasses = ["08", "53", "57", "58"]
        let environmental: Set = [Self.readOnlyTransaction, Self.lockNotAvailable, Self.idleInTransactionTimeout]
        return environmentalClasses.contains(String(sqlstate.prefix(2))) || environmental.contains(sqlstate) || isTransient
    }
}
