internal import CSQLite

/// One prepared statement. Owns its `sqlite3_stmt`, finalized in `deinit`; used only by the connection that made
/// it, which is itself confined to one thread at a time.
@usableFromInline package final class SQLiteStatement {
    package let sql: String
    private let handle: OpaquePointer
    private let connection: OpaquePointer

    /// The number of values each run must bind (`sqlite3_bind_parameter_count`: the largest `?N`).
    package let parameterCount: Int

    init(connection: OpaquePointer, sql: String) throws {
        var statement: OpaquePointer?
        var rest: UnsafePointer<CChar>?
        // SQLITE_PREPARE_PERSISTENT: these statements are cached and reused for the life of the connection.
        let code = sql.withCString { text in
            let code = sqlite3_prepare_v3(connection, text, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, &rest)
            // GRDB's first check: SQL after the first statement would be silently ignored (prepare compiles one).
            if code == SQLITE_OK, let rest, Self.holdsSQL(String(cString: rest)) { return SQLITE_MISUSE }
            return code
        }
        guard code == SQLITE_OK, let statement else {
            if code == SQLITE_MISUSE, let statement { sqlite3_finalize(statement) }
            let message = code == SQLITE_MISUSE ? "more than one statement: the rest would be ignored" : String(cString: sqlite3_errmsg(connection))
            throw SQLiteError(code: code == SQLITE_MISUSE ? code : sqlite3_extended_errcode(connection), message: message, sql: sql)
        }
        self.sql = sql
        self.handle = statement
        self.connection = connection
        self.parameterCount = Int(sqlite3_bind_parameter_count(statement))
    }

    /// Whether `text` (what follows the first statement) holds anything but white space, `;` and comments.
    package static func holdsSQL(_ text: String) -> Bool {
        var rest = Substring(text)
        while let first = rest.first {
            if first.isWhitespace || first == ";" {
                rest = rest.dropFirst()
            } else if rest.hasPrefix("--") {
                rest = rest.drop { $0 != "\n" }
            } else if rest.hasPrefix("/*"), let end = rest.range(of: "*/") {
                rest = rest[end.upperBound...]
            } else {
                return true
            }
        }
        return false
    }

    deinit { sqlite3_finalize(handle) }

    /// Runs the statement with `values` and returns each result row mapped by `map`.
    ///
    /// Inlinable, so it is specialised in the stores' module for each `T`: unspecialised across the module
    /// boundary, every call looked up `[T]`'s type metadata at run time (callgrind, `QueueBench prefill`). What it
    /// touches (this class, `forEachRow`, `SQLiteValue`, `SQLiteRow`) is `@usableFromInline`: the compiler takes a
    /// `package` `@inlinable` member of a type without it as plain `package`, and no caller is specialised (no error,
    /// no warning; bench/results/2026-12-04-callgrind-drivers.md).
    @inlinable
    package func rows<T>(_ values: [SQLiteValue] = [], _ map: (SQLiteRow) throws -> T) throws -> [T] {
        var results: [T] = []
        try forEachRow(values) { results.append(try map($0)) }
        return results
    }

    /// Runs the statement with `values` and hands `body` each result row, which is valid only during the call.
    @usableFromInline package func forEachRow(_ values: [SQLiteValue], _ body: (SQLiteRow) throws -> Void) throws {
        try bind(values)
        defer { sqlite3_reset(handle) }
        while try step() { try body(SQLiteRow(handle: handle)) }
    }

    /// Runs the statement with `values` to completion and returns how many rows it changed.
    @discardableResult
    package func run(_ values: [SQLiteValue] = []) throws -> Int {
        try bind(values)
        defer { sqlite3_reset(handle) }
        while try step() {}
        return Int(sqlite3_changes(connection))
    }

    private func bind(_ values: [SQLiteValue]) throws {
        // GRDB's second check: a value too few binds NULL without a word, one too many is an error only sometimes.
        guard values.count == parameterCount else {
            throw SQLiteError(
                code: SQLITE_MISUSE, message: "\(values.count) values for \(parameterCount) parameters", sql: sql)
        }
        // Every parameter is bound below (the count is checked above), so the last run's values need no clearing.
        for (offset, value) in values.enumerated() {
            let index = Int32(offset + 1)
            let code: Int32
            switch value {
            case .integer(let number): code = sqlite3_bind_int64(handle, index, number)
            case .text(let text):
                // The string's own NUL-terminated bytes: passing the String itself made a copy of them (an allocation a
                // bound text, on the queue writer's commit path). SQLite measures the text, so it ends at a NUL inside,
                // as it did before and as PostgreSQL's driver sends it.
                code = text.withCString { sqlite3_bind_text(handle, index, $0, -1, CSQLite_transient()) }
            case .blob(let bytes):
                code = bytes.withUnsafeBytes { raw in
                    // A zero-length blob must still be a blob, not NULL: SQLite needs a non-nil pointer for that.
                    sqlite3_bind_blob(handle, index, raw.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32(raw.count), CSQLite_transient())
                }
            case .null: code = sqlite3_bind_null(handle, index)
            }
            guard code == SQLITE_OK else { throw failure(code) }
        }
    }

    private func step() throws -> Bool {
        switch sqlite3_step(handle) {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        case let code: throw failure(code)
        }
    }

    private func failure(_ code: Int32) -> SQLiteError {
        SQLiteError(code: sqlite3_extended_errcode(connection), message: String(cString: sqlite3_errmsg(connection)), sql: sql)
    }
}

/// The current row of a stepping statement; valid only inside the `rows` callback.
@usableFromInline package struct SQLiteRow {
    fileprivate let handle: OpaquePointer

    package func int64(_ column: Int32) -> Int64 { sqlite3_column_int64(handle, column) }
    package func int(_ column: Int32) -> Int { Int(sqlite3_column_int64(handle, column)) }
    package func isNull(_ column: Int32) -> Bool { sqlite3_column_type(handle, column) == SQLITE_NULL }
    package func optionalInt64(_ column: Int32) -> Int64? { isNull(column) ? nil : int64(column) }

    package func text(_ column: Int32) -> String {
        guard let pointer = sqlite3_column_text(handle, column) else { return "" }
        let count = Int(sqlite3_column_bytes(handle, column))
        return String(decoding: UnsafeBufferPointer(start: pointer, count: count), as: UTF8.self)
    }

    package func optionalText(_ column: Int32) -> String? { isNull(column) ? nil : text(column) }
    package func bool(_ column: Int32) -> Bool { int64(column) != 0 }

    package func blob(_ column: Int32) -> [UInt8] {
        let count = Int(sqlite3_column_bytes(handle, column))
        guard count > 0, let pointer = sqlite3_column_blob(handle, column) else { return [] }
        return Array(UnsafeRawBufferPointer(start: pointer, count: count))
    }
}
