import Testing

@testable import Queue

/// The statements both stores share are written with PostgreSQL's placeholders; SQLite reads them as `?N`.
@Suite struct SQLitePlaceholdersTests {
    @Test func numberedTypedPlaceholdersBecomeSQLitesNumberedOnes() {
        #expect(
            SQLitePlaceholders.numbered("SELECT a FROM t WHERE b = $1::text AND c <= $12::bigint AND d = ANY($2::text[]) AND e = $3")
                == "SELECT a FROM t WHERE b = ?1 AND c <= ?12 AND d = ANY(?2) AND e = ?3")
    }

    @Test func stringLiteralsAreLeftAsTheyAre() {
        #expect(SQLitePlaceholders.numbered("SELECT '$1::text', 'it''s $2' WHERE x = $3::text") == "SELECT '$1::text', 'it''s $2' WHERE x = ?3")
    }

    @Test func textWithoutPlaceholdersIsUnchanged() {
        let sql = "SELECT count(*) FROM jobs WHERE state = 'running' AND id > 4"
        #expect(SQLitePlaceholders.numbered(sql) == sql)
    }
}
