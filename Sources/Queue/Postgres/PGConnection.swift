internal import CLibPQ
import Foundation

/// One libpq connection. Owns its `PGconn*` (closed in `deinit`) and the names of the statements it prepared.
///
/// A `PGconn` must not be used by two threads at once; `PostgresLink` keeps each inside a `Mutex`.
/// Results are asked for in text format (numbers and booleans parse from text; `bytea` arrives hex-encoded);
/// `bytea` parameters go in binary format.
final class PGConnection {
    struct Options {
        /// Every statement is cancelled by the server after this long (`statement_timeout`), so a lock held by a
        /// stuck client or a server in trouble turns into an error, not a thread blocked for ever.
        var statementTimeout: Duration = .seconds(30)
        /// libpq's `connect_timeout`, in seconds.
        var connectTimeoutSeconds = 10
    }

    private let handle: OpaquePointer
    /// SQL text → prepared statement name, for the statements run with `prepare: true`.
    private var prepared: [String: String] = [:]

    /// Connects with `conninfo`, a libpq URI (`postgres://…`, `postgresql://…`) or key=value string.
    init(conninfo: String, options: Options) throws {
        // Defaults first, then the caller's string: libpq expands `dbname` into its parts and, for a key given twice,
        // keeps the last one, so anything the operator wrote in DATABASE_URL wins.
        // https://www.postgresql.org/docs/15/libpq-connect.html#LIBPQ-PQCONNECTDBPARAMS
        let parameters: [(String, String)] = [
            ("connect_timeout", String(options.connectTimeoutSeconds)),
            ("application_name", "kumapush-relay"),
            // After a failover, with several hosts listed, connect to the one that accepts writes.
            ("target_session_attrs", "read-write"),
            // A server that vanished without closing the socket is noticed in about 30 s instead of hours.
            ("keepalives", "1"), ("keepalives_idle", "10"), ("keepalives_interval", "5"), ("keepalives_count", "3"),
            ("tcp_user_timeout", "30000"),
            ("dbname", conninfo)
        ]
        let keywords = parameters.map { strdup($0.0) } + [nil]
        let values = parameters.map { strdup($0.1) } + [nil]
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
        try execute("SET statement_timeout = \(options.statementTimeout.wholeMilliseconds)")
        // libpq prints server notices ("relation already exists, skipping") on stderr; the relay has its own log.
        try execute("SET client_min_messages = warning")
    }

    deinit { PQfinish(handle) }

    /// True once libpq has seen the connection fail: nothing more can be sent on it.
    var isBroken: Bool { PQstatus(handle) != CONNECTION_OK }

    /// Runs one or more SQL statements that take no parameters (schema, transaction control).
    func execute(_ sql: String) throws {
        let result = PQexec(handle, sql)
        defer { PQclear(result) }
        try check(result, sql: sql)
    }

    /// Runs `sql` with `values` and returns each result row mapped by `map`. `prepare` caches a server-side
    /// prepared statement for SQL run again and again; SQL built per call (its parameter count varies) is sent
    /// unprepared.
    func rows<T>(_ sql: String, _ values: [PGValue] = [], prepare: Bool = true, _ map: (PGRow) throws -> T) throws -> [T] {
        let result = try result(of: sql, values, prepare: prepare)
        defer { PQclear(result) }
        let count = PQntuples(result)
        var rows: [T] = []
        rows.reserveCapacity(Int(count))
        for row in 0..<count { rows.append(try map(PGRow(result: result, row: row))) }
        return rows
    }

    /// Runs `sql` with `values` and returns how many rows it inserted, updated or deleted.
    @discardableResult
    func run(_ sql: String, _ values: [PGValue] = [], prepare: Bool = true) throws -> Int {
        let result = try result(of: sql, values, prepare: prepare)
        defer { PQclear(result) }
        return Int(String(cString: PQcmdTuples(result))) ?? 0
    }

    /// Runs `body` inside `BEGIN … COMMIT`, rolling back if it throws. A COMMIT that fails (connection lost)
    /// throws: the caller must not report success, since it cannot know whether the transaction committed.
    func transaction<T>(_ body: (PGConnection) throws -> T) throws -> T {
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
    func drainNotifications() throws -> Int {
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

    static var libraryVersion: String {
        let version = PQlibVersion()
        return "\(version / 10_000).\(version % 10_000)"
    }

    /// The server's version, e.g. `15.18`.
    var serverVersion: String {
        let version = PQserverVersion(handle)
        return "\(version / 10_000).\(version % 10_000)"
    }

    // MARK: Private

    /// The result of `sql`, which the caller clears.
    private func result(of sql: String, _ values: [PGValue], prepare: Bool) throws -> OpaquePointer {
        // All parameter bytes in one buffer; pointers into it are made inside one withUnsafeBufferPointer.
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
        let name = prepare ? try preparedName(for: sql, parameterCount: values.count) : nil
        let result = buffer.withUnsafeBufferPointer { bytes -> OpaquePointer? in
            let base = bytes.baseAddress.map { UnsafeRawPointer($0).assumingMemoryBound(to: CChar.self) }
            let pointers: [UnsafePointer<CChar>?] = offsets.map { offset in offset.flatMap { offset in base.map { $0 + offset } } }
            return pointers.withUnsafeBufferPointer { pointers in
                if let name {
                    return PQexecPrepared(handle, name, Int32(values.count), pointers.baseAddress, lengths, formats, 0)
                }
                return PQexecParams(handle, sql, Int32(values.count), nil, pointers.baseAddress, lengths, formats, 0)
            }
        }
        do {
            try check(result, sql: sql)
        } catch {
            PQclear(result)
            throw error
        }
        return result!
    }

    private func preparedName(for sql: String, parameterCount: Int) throws -> String {
        if let name = prepared[sql] { return name }
        let name = "kumapush_\(prepared.count + 1)"
        let result = PQprepare(handle, name, sql, Int32(parameterCount), nil)
        defer { PQclear(result) }
        try check(result, sql: sql)
        prepared[sql] = name
        return name
    }

    /// Throws the error a result reports, if any.
    private func check(_ result: OpaquePointer?, sql: String) throws {
        guard let result else {
            // libpq returns no result only when it could not even send the query or ran out of memory.
            throw PGError(sqlstate: "", message: Self.trimmed(PQerrorMessage(handle)), sql: sql, connectionBroken: isBroken)
        }
        switch PQresultStatus(result) {
        case PGRES_COMMAND_OK, PGRES_TUPLES_OK, PGRES_EMPTY_QUERY: return
        default:
            func field(_ code: UInt8) -> String? { PQresultErrorField(result, Int32(code)).map { String(cString: $0) } }
            let message = field(UInt8(ascii: "M")) ?? Self.trimmed(PQresultErrorMessage(result))
            throw PGError(
                sqlstate: field(UInt8(ascii: "C")) ?? "", message: message, constraint: field(UInt8(ascii: "n")),
                sql: sql, connectionBroken: isBroken)
        }
    }

    private static func trimmed(_ message: UnsafePointer<CChar>?) -> String {
        message.map { String(cString: $0).trimmingCharacters(in: .whitespacesAndNewlines) } ?? ""
    }
}

/// One row of a result; valid only inside the `rows` callback.
struct PGRow {
    fileprivate let result: OpaquePointer
    fileprivate let row: Int32

    func isNull(_ column: Int32) -> Bool { PQgetisnull(result, row, column) == 1 }
    func text(_ column: Int32) -> String { String(cString: PQgetvalue(result, row, column)) }
    func optionalText(_ column: Int32) -> String? { isNull(column) ? nil : text(column) }
    func int64(_ column: Int32) -> Int64 { Int64(text(column)) ?? 0 }
    func int(_ column: Int32) -> Int { Int(int64(column)) }
    func optionalInt64(_ column: Int32) -> Int64? { isNull(column) ? nil : int64(column) }
    func bool(_ column: Int32) -> Bool { text(column) == "t" }

    /// A `bytea` column in the text format's hex encoding (`\x0102…`).
    func bytes(_ column: Int32) -> [UInt8] {
        guard let value = PQgetvalue(result, row, column) else { return [] }
        let length = Int(PQgetlength(result, row, column))
        guard length >= 2 else { return [] }
        var bytes: [UInt8] = []
        bytes.reserveCapacity((length - 2) / 2)
        let raw = UnsafeRawPointer(value).assumingMemoryBound(to: UInt8.self)
        var index = 2
        while index + 1 < length {
            bytes.append(Self.nibble(raw[index]) << 4 | Self.nibble(raw[index + 1]))
            index += 2
        }
        return bytes
    }

    private static func nibble(_ character: UInt8) -> UInt8 {
        switch character {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return character - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return character - UInt8(ascii: "a") + 10
        default: return character &- UInt8(ascii: "A") &+ 10
        }
    }
}
