internal import CLibPQ
import Common
import Foundation

/// One libpq connection. Owns its `PGconn*` (closed in `deinit`) and the names of the statements it prepared.
///
/// A `PGconn` must not be used by two threads at once; `PostgresLink` keeps each inside a `Mutex`.
///
/// Statements whose answer the caller does not read (`runDeferred`, and the BEGIN of `beginDeferred`) wait and
/// go to the server with the next statement whose answer is read, in one libpq pipeline: one round trip for all
/// of them. At a trickle, every round trip is a wake-up of the server and of this process, and on a busy machine
/// each wake-up may wait for a core; a transaction of two round trips instead of seven waits less.
/// Results are asked for in text format (numbers and booleans parse from text; `bytea` arrives hex-encoded);
/// `bytea` parameters go in binary format.
///
/// Every statement with parameters is checked as GRDB checks SQLite's (issue 38): it is one statement — the server
/// refuses a text of several in a Parse message (`PQprepare`, `PQexecParams`; SQLSTATE 42601), where `execute`
/// (`PQexec`) would run them all — and it is given exactly as many values as it has parameters, counted by the
/// server for a prepared statement (`PQnparams`) and from the text for one sent unprepared (`PGPlaceholders`).
/// A wrong count fails before anything is sent, with SQLSTATE 07001 (`PGError.parameterCountMismatch`).
@usableFromInline package final class PGConnection {
    package struct Options {
        /// Every statement is cancelled by the server after this long (`statement_timeout`), so a lock held by a
        /// stuck client or a server in trouble turns into an error, not a thread blocked for ever.
        package var statementTimeout: Duration
        /// A statement waiting for a lock (another session's row or table lock) gives up after this long
        /// (`lock_timeout`, SQLSTATE 55P03): a frozen host holding a device's row makes one batch fail fast, not
        /// wait out `statementTimeout` with every other device of the batch.
        package var lockTimeout: Duration
        /// The server ends a session left inside a transaction with nothing to do for this long
        /// (`idle_in_transaction_session_timeout`, SQLSTATE 25P03), releasing its locks: a paused VM, a frozen or
        /// partitioned host holds the devices it locked this long at most, not until TCP gives up (hours).
        package var idleInTransactionTimeout: Duration
        /// libpq's `connect_timeout`, in seconds, for each host of the list.
        package var connectTimeoutSeconds: Int

        package init(
            statementTimeout: Duration = .seconds(30), lockTimeout: Duration = .seconds(5),
            idleInTransactionTimeout: Duration = .seconds(10), connectTimeoutSeconds: Int = 2
        ) {
            self.statementTimeout = statementTimeout
            self.lockTimeout = lockTimeout
            self.idleInTransactionTimeout = idleInTransactionTimeout
            self.connectTimeoutSeconds = connectTimeoutSeconds
        }
    }

    private let handle: OpaquePointer
    /// SQL text → prepared statement name and its parameter count (the server's), for the statements run with
    /// `prepare: true`.
    private var prepared: [String: (name: String, parameters: Int)] = [:]
    /// Statements to send with the next round trip (`runDeferred`).
    private var deferred: [Statement] = []
    /// Round trips to the server so far: one per statement run on its own, one per pipeline (tests count them).
    package private(set) var roundTrips = 0
    /// Tests only: the SQL of every statement queued or run on this connection, in that order; nil (nothing kept)
    /// until `keepStatementLog()`.
    package private(set) var statementLog: [String]?

    package func keepStatementLog() { statementLog = statementLog ?? [] }
    /// Set when a pipeline ended in a state this code does not expect: the connection is then treated as broken
    /// (`isBroken`), so `PostgresLink` replaces it rather than reuse a connection left in pipeline mode.
    private var unusable = false
    /// The server refused a write as read-only (SQLSTATE 25006): it turned read-only under this connection (a
    /// fenced old primary, a standby after a failover). The connection is then unusable too: only a new one lets
    /// libpq's `target_session_attrs=read-write` find the server that now takes writes.
    package private(set) var refusedWrites = false
    /// The server this connection reached, from the conninfo's host list: the one to try last if it fails.
    package var server: PGServer {
        PGServer(host: PQhost(handle).map { String(cString: $0) } ?? "", port: PQport(handle).map { String(cString: $0) } ?? "")
    }
    /// A deferred BEGIN has gone to the server, and no COMMIT or ROLLBACK since: `rollback` has something to undo.
    private var transactionSent = false
    /// The error the server sent outside any statement just before it closed the session (`FATAL`, e.g. 25P03 when it
    /// ended a session idle in its transaction), which libpq hands to the notice receiver rather than to a result.
    /// The statement that then finds the socket closed reports this SQLSTATE instead of none (`check`, `failure`).
    private var sessionEndedBy: (sqlstate: String, message: String)?

    private struct Statement {
        let sql: String
        let values: [PGValue]
        let prepare: Bool
    }

    /// Connects with `conninfo`, a libpq URI (`postgres://…`, `postgresql://…`) or key=value string.
    /// `hostOrder`: the conninfo's host list reordered (`PGHostOrder`), given after it so that it wins.
    package init(conninfo: String, options: Options, hostOrder: [(String, String)] = []) throws {
        // Defaults first, then the caller's string: libpq expands `dbname` into its parts and, for a key given twice,
        // keeps the last one, so anything the operator wrote in DATABASE_URL wins.
        // https://www.postgresql.org/docs/15/libpq-connect.html#LIBPQ-PQCONNECTDBPARAMS
        let parameters: [(String, String)] = [
            ("connect_timeout", String(options.connectTimeoutSeconds)),
            ("application_name", "kumapush-relay"),
            // After a failover, with several hosts listed, connect to the one that accepts writes.
            ("target_session_attrs", "read-write"),
            // A server whose host vanished without closing the socket (power loss, cut network: nothing answers,
            // nothing resets) is noticed in about 4 s: data unacknowledged for 4 s ends the connection, and an idle
            // one is probed after 2 s. Until then a webhook on it waits, and one may meet a dead read connection,
            // then a dead write connection, each followed by a connect (2 s on the dead host): about 12 s, inside
            // SPEC §4 "Failover"'s 15 s. A live server's kernel acknowledges at once, however busy the server.
            ("keepalives", "1"), ("keepalives_idle", "2"), ("keepalives_interval", "1"), ("keepalives_count", "2"),
            ("tcp_user_timeout", "4000"),
            ("dbname", conninfo)
        ]
        let keywords = (parameters + hostOrder).map { strdup($0.0) } + [nil]
        let values = (parameters + hostOrder).map { strdup($0.1) } + [nil]
        defer { (keywords + values).forEach { free($0) } }
        let connection = keywords.map { UnsafePointer($0) }.withUnsafeBufferPointer { keywordPointers in
            values.map { UnsafePointer($0) }.withUnsafeBufferPointer { valuePointers in
                PQconnectdbParams(keywordPointers.baseAddress, valuePointers.baseAddress, 1)
            }
        }
        guard let connection else { throw PGError(sqlstate: "", message: "out of memory", connectionBroken: true) }
        guard PQstatus(connection) == CONNECTION_OK else {
            let message = Self.trimmed(PQerrorMessage(connection))
            PQfinish(connection)
            throw PGError(sqlstate: "", message: "cannot connect: \(message)", connectionBroken: true)
        }
        handle = connection
        // Unmanaged.passUnretained: libpq calls the receiver only from inside calls on `handle`, which this object
        // owns and frees in `deinit` (PQfinish), so the receiver never outlives it.
        PQsetNoticeReceiver(handle, pgNoticeReceived, Unmanaged.passUnretained(self).toOpaque())
        // No session-level SET of a planner setting here: `PostgresStore.promotion(of:)` sets some for one statement
        // and puts them back `TO DEFAULT`, which would undo it.
        // The three timeouts bound what one session can hold and wait for (SPEC §4 "No single point of trouble"); they
        // are session settings, so a pooler in transaction mode must pass them on (docs/operations.md).
        // libpq prints server notices ("relation already exists, skipping") on stderr; the relay has its own log.
        // `bytea` columns are read in the hex form (`PGRow.bytes`), whatever the database or role sets by default:
        // read in the escape form, every payload would be garbage and its job a dead letter.
        try execute(
            """
            SET statement_timeout = \(options.statementTimeout.wholeMilliseconds);
            SET lock_timeout = \(options.lockTimeout.wholeMilliseconds);
            SET idle_in_transaction_session_timeout = \(options.idleInTransactionTimeout.wholeMilliseconds);
            SET client_min_messages = warning; SET bytea_output = hex
            """)
    }

    deinit { PQfinish(handle) }

    /// True once libpq has seen the connection fail: nothing more can be sent on it.
    package var isBroken: Bool { unusable || PQstatus(handle) != CONNECTION_OK }

    /// Runs one or more SQL statements that take no parameters (schema, transaction control).
    package func execute(_ sql: String) throws {
        // A string of several statements cannot go through a pipeline: what waits is sent first, on its own.
        if !deferred.isEmpty { PQclear(try pipelined(then: nil)) }
        statementLog?.append(sql)
        roundTrips += 1
        let result = PQexec(handle, sql)
        defer { PQclear(result) }
        try check(result, sql: sql)
    }

    /// Runs `sql` with `values` and returns each result row mapped by `map`. `prepare` caches a server-side
    /// prepared statement for SQL run again and again; SQL built per call (its parameter count varies) is sent
    /// unprepared.
    ///
    /// Inlinable, so it is specialised in the store's module for each `T`; hence `@usableFromInline` on this class,
    /// `forEachRow`, `PGValue` and `PGRow` (see `SQLiteStatement.rows`).
    @inlinable
    package func rows<T>(_ sql: String, _ values: [PGValue] = [], prepare: Bool = true, _ map: (PGRow) throws -> T) throws -> [T] {
        var rows: [T] = []
        try forEachRow(sql, values, prepare: prepare) { count, row in
            if rows.isEmpty { rows.reserveCapacity(count) }
            rows.append(try map(row))
        }
        return rows
    }

    /// Runs `sql` with `values` and hands `body` the number of rows and each row, valid only during the call.
    @usableFromInline package func forEachRow(
        _ sql: String, _ values: [PGValue], prepare: Bool, _ body: (_ count: Int, PGRow) throws -> Void
    ) throws {
        let result = try result(of: sql, values, prepare: prepare)
        defer { PQclear(result) }
        let count = PQntuples(result)
        for row in 0..<count { try body(Int(count), PGRow(result: result, row: row)) }
    }

    /// Runs `sql` with `values` and returns how many rows it inserted, updated or deleted.
    @discardableResult
    package func run(_ sql: String, _ values: [PGValue] = [], prepare: Bool = true) throws -> Int {
        let result = try result(of: sql, values, prepare: prepare)
        defer { PQclear(result) }
        return Int(String(cString: PQcmdTuples(result))) ?? 0
    }

    /// Queues `sql` to be sent with the next statement whose answer is read (or with `commit`): one round trip for
    /// both. Only inside a transaction, whose every statement is undone if this one fails: its error is thrown by
    /// that later call, and nothing after it in the transaction runs.
    package func runDeferred(_ sql: String, _ values: [PGValue] = [], prepare: Bool = true) {
        statementLog?.append(sql)
        deferred.append(Statement(sql: sql, values: values, prepare: prepare))
    }

    /// Opens a transaction whose BEGIN travels with its first statement (`runDeferred`).
    package func beginDeferred() {
        runDeferred("BEGIN", prepare: false)
    }

    /// Commits the transaction, sending whatever waits first in the same round trip. Throws when any of it
    /// failed; a COMMIT that fails (connection lost) leaves the outcome unknown, as with `transaction`.
    package func commit() throws {
        PQclear(try pipelined(then: Statement(sql: "COMMIT", values: [], prepare: false)))
        // Only now is the transaction over: a statement that failed before the COMMIT left it open (aborted), and
        // `rollback` must still end it.
        transactionSent = false
    }

    /// Rolls the open transaction back, dropping statements that were never sent.
    package func rollback() {
        deferred = []
        // A BEGIN that never left (still waiting, or its pipeline failed before it was sent) opened nothing.
        if transactionSent && !isBroken { try? execute("ROLLBACK") }
        transactionSent = false
    }

    /// Runs `body` inside `BEGIN … COMMIT`, rolling back if it throws. A COMMIT that fails (connection lost)
    /// throws: the caller must not report success, since it cannot know whether the transaction committed.
    package func transaction<T>(_ body: (PGConnection) throws -> T) throws -> T {
        try execute("BEGIN")
        do {
            let result = try body(self)
            try execute("COMMIT")
            return result
        } catch {
            if !isBroken { try? execute("ROLLBACK") }
            throw error
        }
    }

    /// Reads whatever the server has sent without waiting (`PQconsumeInput`) and returns how many notifications of
    /// channels this connection LISTENs to arrived. No round trip: it only drains the socket.
    package func drainNotifications() throws -> Int {
        guard PQconsumeInput(handle) == 1 else {
            throw PGError(sqlstate: "", message: Self.trimmed(PQerrorMessage(handle)), connectionBroken: true)
        }
        var count = 0
        while let notification = PQnotifies(handle) {
            count += 1
            PQfreemem(notification)
        }
        return count
    }

    /// Sleeps until the server sends something (a notification, or the end of the session), `interrupt` is raised,
    /// or `timeout` passes (poll(2) on `PQsocket`). Only for a connection that LISTENs and runs nothing else: no
    /// statement may be waiting for its answer. Reads nothing: `drainNotifications` does.
    package func waitForInput(orInterrupt interrupt: PGInterrupt, timeout: Duration) -> PGInputWait {
        let socket = PQsocket(handle)
        // No socket: the connection is gone, which the next drain reports at once.
        guard socket >= 0 else { return .input }
        return interrupt.wait(for: socket, timeout: timeout)
    }

    package static var libraryVersion: String {
        let version = PQlibVersion()
        return "\(version / 10_000).\(version % 10_000)"
    }

    // MARK: Private

    /// The result of `sql`, which the caller clears.
    private func result(of sql: String, _ values: [PGValue], prepare: Bool) throws -> OpaquePointer {
        statementLog?.append(sql)
        let statement = Statement(sql: sql, values: values, prepare: prepare)
        if !deferred.isEmpty, let result = try pipelined(then: statement) { return result }
        let name = try checkedName(statement)
        roundTrips += 1
        let result = Self.withParameters(values) { pointers, lengths, formats in
            if let name {
                return PQexecPrepared(handle, name, Int32(values.count), pointers, lengths, formats, 0)
            }
            return PQexecParams(handle, sql, Int32(values.count), nil, pointers, lengths, formats, 0)
        }
        do {
            try check(result, sql: sql)
        } catch {
            PQclear(result)
            throw error
        }
        return result!
    }

    /// Sends the deferred statements and then `last` in one pipeline, waits for all their answers (one round trip)
    /// and returns the result of the last statement sent, which the caller clears. The first failure among them is
    /// thrown: the server skipped every statement after it (`PGRES_PIPELINE_ABORTED`).
    ///
    /// The connection stays in blocking mode. Sending a large pipeline cannot deadlock against a server blocked on
    /// sending its answers: while libpq waits to write, it reads what arrives (`pqSendSome`); and the answers to
    /// the statements before the last are a few rows at most (BEGIN, locks, writes).
    private func pipelined(then last: Statement?) throws(PGError) -> OpaquePointer? {
        let statements = deferred + (last.map { [$0] } ?? [])
        deferred = []
        guard !statements.isEmpty else { return nil }
        // PQprepare is synchronous and not allowed in a pipeline: new statements are prepared first.
        var names: [String?] = []
        for statement in statements { names.append(try checkedName(statement)) }
        guard PQenterPipelineMode(handle) == 1 else {
            unusable = true
            throw failure(sql: statements[0].sql)
        }
        roundTrips += 1
        for (statement, name) in zip(statements, names) {
            let accepted = Self.withParameters(statement.values) { pointers, lengths, formats in
                if let name {
                    return PQsendQueryPrepared(handle, name, Int32(statement.values.count), pointers, lengths, formats, 0)
                }
                return PQsendQueryParams(handle, statement.sql, Int32(statement.values.count), nil, pointers, lengths, formats, 0)
            }
            guard accepted == 1 else {
                unusable = true
                throw failure(sql: statement.sql)
            }
        }
        guard PQpipelineSync(handle) == 1 else {
            unusable = true
            throw failure(sql: statements[statements.count - 1].sql)
        }
        if statements.contains(where: { $0.sql == "BEGIN" }) { transactionSent = true }
        var firstError: PGError?
        var lastResult: OpaquePointer?
        for statement in statements {
            // Each statement's answer is one result, then NULL; no result at all means the connection failed.
            guard let result = PQgetResult(handle) else {
                unusable = true
                firstError = firstError ?? failure(sql: statement.sql)
                break
            }
            while let extra = PQgetResult(handle) { PQclear(extra) }
            PQclear(lastResult)
            lastResult = nil
            if PQresultStatus(result) == PGRES_PIPELINE_ABORTED {
                PQclear(result)
                continue
            }
            do throws(PGError) {
                try check(result, sql: statement.sql)
                lastResult = result
            } catch {
                PQclear(result)
                firstError = firstError ?? error
            }
        }
        if !unusable {
            let sync = PQgetResult(handle)
            if sync == nil || PQresultStatus(sync) != PGRES_PIPELINE_SYNC || PQexitPipelineMode(handle) != 1 { unusable = true }
            PQclear(sync)
        }
        if firstError == nil && unusable { firstError = failure(sql: statements[statements.count - 1].sql) }
        if let firstError {
            PQclear(lastResult)
            throw firstError
        }
        return lastResult
    }

    /// The error libpq reports for a call that failed before any result (connection lost, out of memory).
    private func failure(sql: String) -> PGError {
        if let ended = sessionEndedBy, isBroken {
            return PGError(sqlstate: ended.sqlstate, message: ended.message, sql: sql, connectionBroken: true)
        }
        return PGError(sqlstate: "", message: Self.trimmed(PQerrorMessage(handle)), sql: sql, connectionBroken: true)
    }

    /// A notice or warning from the server, or an error it sent outside any statement (see `sessionEndedBy`). Notices
    /// go to stderr as libpq's default receiver prints them; a FATAL is kept for the error that follows instead.
    fileprivate func noticeReceived(_ result: OpaquePointer) {
        func field(_ code: UInt8) -> String? { PQresultErrorField(result, Int32(code)).map { String(cString: $0) } }
        // 'V': the severity, never localized (PG_DIAG_SEVERITY_NONLOCALIZED).
        if let severity = field(UInt8(ascii: "V")), severity == "FATAL" || severity == "PANIC" {
            sessionEndedBy = (field(UInt8(ascii: "C")) ?? "", field(UInt8(ascii: "M")) ?? Self.trimmed(PQresultErrorMessage(result)))
            return
        }
        if let text = PQresultErrorMessage(result) { FileHandle.standardError.write(Data(String(cString: text).utf8)) }
    }

    /// Calls `body` with libpq's parameter arrays for `values`: pointers into one buffer holding every value's
    /// bytes, their lengths and formats, valid only during the call.
    private static func withParameters<R>(
        _ values: [PGValue],
        _ body: (UnsafePointer<UnsafePointer<CChar>?>?, [Int32], [Int32]) -> R
    ) -> R {
        var buffer: [UInt8] = []
        var offsets: [Int?] = []
        var lengths: [Int32] = []
        for value in values {
            if let bytes = value.wireBytes {
                offsets.append(buffer.count)
                lengths.append(Int32(bytes.count))
                buffer.append(contentsOf: bytes)
            } else {
                offsets.append(nil)
                lengths.append(0)
            }
        }
        let formats = values.map(\.format)
        return buffer.withUnsafeBufferPointer { bytes in
            let base = bytes.baseAddress.map { UnsafeRawPointer($0).assumingMemoryBound(to: CChar.self) }
            let pointers: [UnsafePointer<CChar>?] = offsets.map { offset in offset.flatMap { offset in base.map { $0 + offset } } }
            return pointers.withUnsafeBufferPointer { pointers in body(pointers.baseAddress, lengths, formats) }
        }
    }

    /// The prepared statement's name (nil for one sent unprepared), once its parameters are known to match the
    /// values: a statement given too few would fail at the server as a protocol violation, and one given too many
    /// with a type it cannot infer.
    private func checkedName(_ statement: Statement) throws(PGError) -> String? {
        let (name, parameters) =
            statement.prepare ? try preparedStatement(for: statement.sql) : (nil, PGPlaceholders.count(in: statement.sql))
        guard statement.values.count == parameters else {
            throw PGError(
                sqlstate: PGError.parameterCountMismatch, message: "\(statement.values.count) values for \(parameters) parameters",
                sql: statement.sql)
        }
        return name
    }

    /// Prepares `sql` once per connection, letting the server infer every parameter's type (the SQL casts each),
    /// and asks it how many parameters the statement takes.
    private func preparedStatement(for sql: String) throws(PGError) -> (name: String, parameters: Int) {
        if let known = prepared[sql] { return known }
        let name = "kumapush_\(prepared.count + 1)"
        let result = PQprepare(handle, name, sql, 0, nil)
        defer { PQclear(result) }
        try check(result, sql: sql)
        let description = PQdescribePrepared(handle, name)
        defer { PQclear(description) }
        try check(description, sql: sql)
        let known = (name: name, parameters: Int(PQnparams(description)))
        prepared[sql] = known
        return known
    }

    /// Throws the error a result reports, if any.
    private func check(_ result: OpaquePointer?, sql: String) throws(PGError) {
        guard let result else {
            // libpq returns no result only when it could not even send the query or ran out of memory.
            throw PGError(sqlstate: "", message: Self.trimmed(PQerrorMessage(handle)), sql: sql, connectionBroken: isBroken)
        }
        switch PQresultStatus(result) {
        case PGRES_COMMAND_OK, PGRES_TUPLES_OK, PGRES_EMPTY_QUERY: return
        default:
            func field(_ code: UInt8) -> String? { PQresultErrorField(result, Int32(code)).map { String(cString: $0) } }
            var message = field(UInt8(ascii: "M")) ?? Self.trimmed(PQresultErrorMessage(result))
            var sqlstate = field(UInt8(ascii: "C")) ?? ""
            if sqlstate.isEmpty, let ended = sessionEndedBy, isBroken { (sqlstate, message) = ended }
            if sqlstate == PGError.readOnlyTransaction {
                refusedWrites = true
                unusable = true
            }
            // The server ended the session (it sat in a transaction past idle_in_transaction_session_timeout, e.g.
            // while this host was frozen): libpq may not have seen the socket close yet, but nothing more can run on it.
            if sqlstate == PGError.idleInTransactionTimeout { unusable = true }
            throw PGError(
                sqlstate: sqlstate, message: message, constraint: field(UInt8(ascii: "n")),
                sql: sql, connectionBroken: isBroken)
        }
    }

    private static func trimmed(_ message: UnsafePointer<CChar>?) -> String {
        message.map { String(cString: $0).trimmingCharacters(in: .whitespacesAndNewlines) } ?? ""
    }
}

/// libpq's notice receiver (https://www.postgresql.org/docs/15/libpq-notice-processing.html), set per connection in
/// `PGConnection.init` with the connection as its argument.
private func pgNoticeReceived(_ owner: UnsafeMutableRawPointer?, _ result: OpaquePointer?) {
    guard let owner, let result else { preconditionFailure("pgNoticeReceived: libpq passed no connection or no result") }
    Unmanaged<PGConnection>.fromOpaque(owner).takeUnretainedValue().noticeReceived(result)
}
