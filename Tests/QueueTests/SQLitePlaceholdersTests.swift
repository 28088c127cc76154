import SQLiteDriver
import Testing

@testable import Queue

/// The statements both stores share are written with PostgreSQL's placeholders; SQLite reads them as `?N`.
@Suite struct SQLitePlaceholdersTests {
    @Test func numberedTypedPlaceholdersBecomeSQLitesNumberedOnes() {
        #expect(
            SQLitePlaceholders.numbered("SELECT a FROM t WHERE b = $1::text AND c <= $12::bigint AND d IN ($2::text[]) AND e = $3")
                == "SELECT a FROM t WHERE b = ?1 AND c <= ?12 AND d IN (?2) AND e = ?3")
    }

    @Test func literalsQuotedIdentifiersAndCommentsAreLeftAsTheyAre() {
        #expect(SQLitePlaceholders.numbered("SELECT '$1::text', 'it''s $2' WHERE x = $3::text") == "SELECT '$1::text', 'it''s $2' WHERE x = ?3")
        #expect(SQLitePlaceholders.numbered(#"SELECT "a$1", "b""$2" FROM t WHERE x = $3"#) == #"SELECT "a$1", "b""$2" FROM t WHERE x = ?3"#)
        #expect(
            SQLitePlaceholders.numbered("SELECT 1 -- don't $1\nWHERE x = $2::text /* it's $3 */ AND y = $4")
                == "SELECT 1 -- don't $1\nWHERE x = ?2 /* it's $3 */ AND y = ?4")
    }

    @Test func aDollarInsideAWordIsPartOfAnIdentifier() {
        #expect(SQLitePlaceholders.numbered("SELECT col$1 FROM t WHERE x = $1") == "SELECT col$1 FROM t WHERE x = ?1")
    }

    @Test func textWithoutPlaceholdersIsUnchanged() {
        let sql = "SELECT count(*) FROM jobs WHERE state = 'running' AND id > 4"
        #expect(SQLitePlaceholders.numbered(sql) == sql)
    }
}
