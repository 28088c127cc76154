import PostgresDriver
import TestSupport
import Testing

@testable import Queue

/// GRDB's two statement checks, for libpq (issue 38): a statement with parameters is one statement, and it is given
/// exactly as many values as it has parameters — a wrong count is the caller's bug, refused before anything is sent,
/// never the protocol violation (class 08, "the connection is lost") the server would answer.
@Suite struct PGStatementChecksTests {
    @Test func placeholdersAreCountedAsTheServerCountsThem() {
        #expect(PGPlaceholders.count(in: "SELECT $1::int + $3::int") == 3)
        #expect(PGPlaceholders.count(in: "SELECT $12::int") == 12)
        #expect(PGPlaceholders.count(in: "SELECT 1") == 0)
        // Not parameters: inside literals, quoted identifiers, comments, dollar quotes, identifiers.
        #expect(PGPlaceholders.count(in: "SELECT '$5', 'it''s $6', $2::text") == 2)
        #expect(PGPlaceholders.count(in: "SELECT \"a$9\" FROM t WHERE x = $1::int") == 1)
        #expect(PGPlaceholders.count(in: "SELECT $1::int -- and $4\n") == 1)
        #expect(PGPlaceholders.count(in: "SELECT /* $4 */ $2::int") == 2)
        #expect(PGPlaceholders.count(in: "DO $$ BEGIN PERFORM $7; END $$") == 0)
        #expect(PGPlaceholders.count(in: "DO $body$ SELECT $7 $body$; SELECT $1::int") == 1)
        #expect(PGPlaceholders.count(in: "SELECT a$1 FROM t") == 0)
    }

    @Test(arguments: [true, false]) func moreThanOneStatementIsRefusedAndNoneOfItRuns(prepare: Bool) throws {
        let location = try PostgresServer.shared().createDatabase()
        let db = try PGConnection(conninfo: location, options: .init())
        let error = #expect(throws: PGError.self) {
            try db.rows("SELECT $1::int; CREATE TABLE sneaky (x int)", [.integer(1)], prepare: prepare) { $0.int(0) }
        }
        #expect(error?.sqlstate == "42601")
        #expect(try RawPostgres(location).query("SELECT count(*) FROM pg_tables WHERE tablename = 'sneaky'") == [["0"]])
        // A trailing semicolon is no second statement.
        #expect(try db.rows("SELECT $1::int;", [.integer(4)], prepare: prepare) { $0.int(0) } == [4])
    }

    @Test(arguments: [true, false]) func aStatementGetsExactlyItsParametersValues(prepare: Bool) throws {
        let db = try PGConnection(conninfo: try PostgresServer.shared().createDatabase(), options: .init())
        let sql = "SELECT $1::int + $2::int + $3::int"
        for values: [PGValue] in [[.integer(1), .integer(2)], [.integer(1), .integer(2), .integer(3), .integer(4)]] {
            let error = #expect(throws: PGError.self) { try db.rows(sql, values, prepare: prepare) { $0.int(0) } }
            #expect(error?.sqlstate == PGError.parameterCountMismatch)
            #expect(error?.message == "\(values.count) values for 3 parameters")
            #expect(error?.isEnvironmental == false, "a bug, not a reason to try again later")
        }
        #expect(try db.rows(sql, [.integer(1), .integer(2), .integer(3)], prepare: prepare) { $0.int(0) } == [6])
        #expect(!db.isBroken)
    }

    /// In a pipeline too: the wrong statement is refused before any of the transaction is sent, and the connection
    /// stays usable.
    @Test func aDeferredStatementWithTheWrongCountFailsItsTransactionBeforeAnythingIsSent() throws {
        let location = try PostgresServer.shared().createDatabase()
        let db = try PGConnection(conninfo: location, options: .init())
        try db.execute("CREATE TABLE t (x int)")
        let roundTrips = db.roundTrips
        db.beginDeferred()
        db.runDeferred("INSERT INTO t VALUES ($1::int)", [.integer(1)])
        db.runDeferred("INSERT INTO t VALUES ($1::int)", [])
        let error = #expect(throws: PGError.self) { try db.commit() }
        db.rollback()
        #expect(error?.sqlstate == PGError.parameterCountMismatch)
        #expect(db.roundTrips == roundTrips, "nothing was sent")
        #expect(try db.rows("SELECT count(*) FROM t") { $0.int(0) } == [0])
    }
}
