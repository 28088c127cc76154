import Testing

@testable import Queue

/// The dead-letter filter written once for both stores (issue 38): each term with its value, in order, spelled in
/// each store's placeholders.
@Suite struct DeadLetterQueryTests {
    @Test func eachFilterTermComesWithItsValueInOrder() {
        let filter = DeadLetterFilter(reason: "BadTopic", deviceID: "d", since: 5, after: 9)
        let (sqlite, sqliteValues): (String, [SQLiteValue]) = filter.conditions { _, _ in "?" }
        #expect(sqlite == "state = 'discarded' AND last_error = ? AND device_id = ? AND finalized_at >= ? AND id > ?")
        #expect(sqliteValues.count == 4)
        let (postgres, postgresValues) = PostgresStore.conditions(DeadLetterFilter(deviceID: "d", after: 9))
        #expect(postgres == "state = 'discarded' AND device_id = $1::text AND id > $2::bigint")
        guard case .text("d") = postgresValues[0], case .integer(9) = postgresValues[1] else {
            Issue.record("values out of order: \(postgresValues)")
            return
        }
        #expect(SQLiteStore.conditions(DeadLetterFilter()).0 == "state = 'discarded'")
    }
}
