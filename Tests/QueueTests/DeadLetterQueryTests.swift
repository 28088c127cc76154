import PostgresDriver
import SQLiteDriver
import Testing

@testable import Queue

/// The dead-letter filter written once for both stores (issue 38): each term with its value, in order, numbered
/// from `$1`; SQLite reads the same numbers (`SQLitePlaceholders`).
@Suite struct DeadLetterQueryTests {
    @Test func eachFilterTermComesWithItsValueInOrder() {
        let filter = DeadLetterFilter(reason: "BadTopic", deviceID: "d", since: 5, after: 9)
        let (all, allValues): (String, [SQLiteValue]) = filter.conditions()
        #expect(all == "state = 'discarded' AND last_error = $1::text AND device_id = $2::text AND finalized_at >= $3::bigint AND id > $4::bigint")
        #expect(allValues.count == 4)
        let (postgres, postgresValues): (String, [PGValue]) = DeadLetterFilter(deviceID: "d", after: 9).conditions()
        #expect(postgres == "state = 'discarded' AND device_id = $1::text AND id > $2::bigint")
        guard case .text("d") = postgresValues[0], case .integer(9) = postgresValues[1] else {
            Issue.record("values out of order: \(postgresValues)")
            return
        }
        let (none, _): (String, [SQLiteValue]) = DeadLetterFilter().conditions()
        #expect(none == "state = 'discarded'")
    }
}
