import Common

/// The dead-letter statements both stores run as written (`SharedQueries`); the filter is `DeadLetterFilter.conditions`.
extension SharedQueries {
    public func countDeadLetters(_ filter: DeadLetterFilter) throws(StoreError) -> Int {
        let (whereClause, values): (String, [Connection.Value]) = filter.conditions()
        return try read { db in try db.query("SELECT count(*) FROM jobs WHERE \(whereClause)", values) { $0.int(0) }.first ?? 0 }
    }

    /// `CASE`, not `max(0, …)` or `greatest(0, …)`: the one spelling both databases have.
    public func purgeDeadLetters(keeping: Int) throws(StoreError) -> Int {
        try writeStatement { db in
            try db.change(
                """
                DELETE FROM jobs WHERE id IN (
                    SELECT id FROM jobs WHERE state = 'discarded' ORDER BY finalized_at, id
                    LIMIT (SELECT CASE WHEN count(*) > $1::bigint THEN count(*) - $1::bigint ELSE 0 END
                           FROM jobs WHERE state = 'discarded'))
                """, [.integer(Int64(keeping))])
        }
    }

    public func purgeDeadLetters(before: Int64) throws(StoreError) -> Int {
        try writeStatement { db in
            try db.change("DELETE FROM jobs WHERE state = 'discarded' AND finalized_at < $1::bigint", [.integer(before)])
        }
    }

    /// The dead letters `filter` matches, oldest first, at most `limit`: what a replay (each store's own) examines.
    static func deadLetters(_ filter: DeadLetterFilter, limit: Int, _ db: Connection) throws -> [(id: Int64, device: String)] {
        let (whereClause, values): (String, [Connection.Value]) = filter.conditions()
        return try db.query(
            "SELECT id, device_id FROM jobs WHERE \(whereClause) ORDER BY id LIMIT $\(values.count + 1)::bigint",
            values + [.integer(Int64(limit))]
        ) { (id: $0.int64(0), device: $0.text(1)) }
    }

    public func listDeadLetters(_ filter: DeadLetterFilter, limit: Int) throws(StoreError) -> [DeadLetter] {
        let (whereClause, values): (String, [Connection.Value]) = filter.conditions()
        return try read { db in
            try db.query(
                "SELECT \(DeadLetter.columns) FROM jobs WHERE \(whereClause) ORDER BY id LIMIT $\(values.count + 1)::bigint",
                values + [.integer(Int64(limit))]
            ) { DeadLetter(row: $0) }
        }
    }

    public func purgeDeadLetters(_ filter: DeadLetterFilter) throws(StoreError) -> Int {
        let (whereClause, values): (String, [Connection.Value]) = filter.conditions()
        return try writeStatement { db in try db.change("DELETE FROM jobs WHERE \(whereClause)", values) }
    }
}
