internal import CSQLite

/// A failed SQLite call: the extended result code, SQLite's message and the SQL text. Bound values are never part
/// of it (they hold device tokens and notification content).
package struct SQLiteError: Error, CustomStringConvertible {
    package let code: Int32
    package let message: String
    package let sql: String?

    package var primaryCode: Int32 { code & 0xff }
    package var description: String {
        "SQLite error \(code) (\(String(cString: sqlite3_errstr(code)))): \(message)" + (sql.map { " in: \($0)" } ?? "")
    }

    /// A row's PRIMARY KEY is taken (the extended code; `sqlite3_extended_result_codes` is on for every connection).
    package var isPrimaryKeyViolation: Bool { code == CSQLite_CONSTRAINT_PRIMARYKEY }
    /// A UNIQUE column or index other than the primary key already holds the value.
    package var isUniqueViolation: Bool { code == CSQLite_CONSTRAINT_UNIQUE }

    /// Failures of the environment rather than of the statement: the database is locked by someone else for longer
    /// than the busy timeout, the disk is full or failing, or the file is not writable. Callers answer these with
    /// "try again later" instead of treating them as bugs.
    package var isEnvironmental: Bool {
        [
            SQLITE_BUSY, SQLITE_LOCKED, SQLITE_FULL, SQLITE_IOERR, SQLITE_READONLY, SQLITE_CANTOPEN, SQLITE_NOMEM,
            SQLITE_PROTOCOL
        ].contains(primaryCode)
    }

    /// The file is not a database at all, or a damaged one.
    package var isCorruption: Bool { primaryCode == SQLITE_NOTADB || primaryCode == SQLITE_CORRUPT }
}
