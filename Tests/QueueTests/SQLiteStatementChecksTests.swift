import SQLiteDriver
import TestSupport
import Testing

@testable import Queue

/// GRDB's two checks on every prepared statement (issue 38): SQL after the first statement is refused, not silently
/// ignored, and each run binds exactly as many values as the statement has parameters (too few would bind NULL
/// without a word).
@Suite struct SQLiteStatementChecksTests {
    func connection() throws -> (SQLiteConnection, TemporaryDirectory) {
        let directory = TemporaryDirectory()
        return (try SQLiteConnection(path: directory.path("checks.db"), options: .init()), directory)
    }

    @Test func sqlAfterTheFirstStatementIsRefused() throws {
        let (db, directory) = try connection()
        _ = directory
        #expect(throws: SQLiteError.self) { try db.statement("SELECT 1; SELECT 2") }
        #expect(throws: SQLiteError.self) { try db.statement("SELECT 1; DELETE FROM sqlite_master") }
        // Trailing white space, semicolons and comments are no second statement.
        #expect(try db.statement("SELECT 1; -- the end\n  /* really */ ;").rows { $0.int(0) } == [1])
    }

    @Test func eachRunBindsExactlyTheStatementsParameters() throws {
        let (db, directory) = try connection()
        _ = directory
        let statement = try db.statement("SELECT ?1 + ?3")
        #expect(statement.parameterCount == 3)
        #expect(throws: SQLiteError.self) { try statement.rows([.integer(1), .integer(2)]) { $0.int(0) } }
        #expect(throws: SQLiteError.self) { try statement.rows([.integer(1), .integer(2), .integer(3), .integer(4)]) { $0.int(0) } }
        #expect(try statement.rows([.integer(1), .integer(2), .integer(3)]) { $0.int(0) } == [4])
    }

    /// Texts are bound from their own bytes: the empty text stays text (not NULL), bytes past ASCII are kept whole,
    /// and a NUL inside ends the text, as PostgreSQL's driver sends it too (both stores keep the same text).
    @Test func textsAreBoundWhole() throws {
        let (db, directory) = try connection()
        _ = directory
        let statement = try db.statement("SELECT typeof(?1), length(CAST(?1 AS BLOB)), hex(?1)")
        for text in ["", "device-0f3c", "Café ✓ 監視", "a\u{0}b", String(repeating: "x", count: 300)] {
            let rows = try statement.rows([.text(text)]) { ($0.text(0), $0.int(1), $0.text(2)) }
            #expect(rows.count == 1)
            #expect(rows.first?.0 == "text")
            let kept = text.utf8.prefix { $0 != 0 }
            #expect(rows.first?.1 == kept.count)
            #expect(rows.first?.2 == kept.map { String(format: "%02X", $0) }.joined())
        }
    }
}
