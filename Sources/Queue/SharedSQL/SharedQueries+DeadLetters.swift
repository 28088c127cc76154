import Common

/// The dead-letter statements both stores run as written (`SharedQueries`); the filter is `DeadLetterFilter.conditions`.
extension SharedQueries {
    public func countDeadLetters(_ filter: DeadLetterFilter) throws(StoreError) -> Int {
        let (whereClause, values): (String, [Connection.Value]) = filter.conditions()
        return try read { db in try db.query("SELECT count(*) FROM jobs WHERE \(whereClause)", values) { $0.int(0) }.first ?? 0 }
    }

    public func lastDeadLetterID(_ filter: DeadLetterFilter) throws(StoreError) -> Int64? {
        let (whereClause, values): (String, [Connection.Value]) = filter.conditions()
        return try read { db in try db.query("SELECT max(id) FROM jobs WHERE \(whereClause)", values) { $0.optionalInt64(0) }.first ?? nil }
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

    /// One row at a time: whether a replayed job becomes its device's head depends on the rows before it. It is
    /// stored again under a new id (and on SQLite its device's next number), so it queues behind every job its device
    /// already has: keeping the old id would put replayed jobs ahead of newer ones. Its badge is the device's count
    /// now: it is delivered after every job the device has, and carries the last word on the badge (the count it was
    /// first stored with would set the phone back). A replayed job no longer reports an outcome.
    public func replayDeadLetters(
        _ filter: DeadLetterFilter, limit: Int, now: Int64, ttl: Duration, deviceCap: Int
    ) throws(StoreError) -> ReplayBatch {
        let replay = DeadLetterReplay(
            now: now, expiresAt: now + ttl.wholeMilliseconds, badgeSince: now - monitorRetention.wholeMilliseconds,
            deviceCap: Int64(min(deviceCap, Int(Int64.max))))
        return try write { db in
            let letters = try Self.deadLetters(filter, limit: limit, db)
            prepareReplay(of: Set(letters.map(\.device)), db)
            var batch = ReplayBatch(replayed: 0, leftAtCap: 0, lastExamined: letters.last?.id)
            for letter in letters {
                if try requeue(letter, replay, db) {
                    batch.replayed += 1
                } else if try !db.query("SELECT 1 FROM devices WHERE id = $1::text", [.text(letter.device)], { _ in true }).isEmpty {
                    // Its device is at its cap: it stays a dead letter.
                    batch.leftAtCap += 1
                    continue
                }
                // Requeued, or its device is gone (a binary older than schema 12 left it): the dead letter goes.
                _ = try db.change("DELETE FROM jobs WHERE id = $1::bigint AND state = 'discarded'", [.integer(letter.id)])
            }
            if batch.replayed > 0 { jobsBecameDue(in: db) }
            return batch
        }
    }

    /// The dead letters `filter` matches, oldest first, at most `limit`: what a replay examines.
    static func deadLetters(_ filter: DeadLetterFilter, limit: Int, _ db: Connection) throws -> [DeadLetterRef] {
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

/// A dead letter a replay examines.
typealias DeadLetterRef = (id: Int64, device: String)

/// What a replay transaction stores a dead letter again with.
struct DeadLetterReplay {
    /// Due at once.
    let now: Int64
    /// A fresh JOB_TTL.
    let expiresAt: Int64
    /// The badge counts monitors heard of since then (`monitorRetention`).
    let badgeSince: Int64
    /// DEVICE_QUEUE_MAX: a device holding this many live jobs keeps its dead letter (SPEC §4).
    let deviceCap: Int64
}
