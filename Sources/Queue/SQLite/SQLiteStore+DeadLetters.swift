import Common

extension SQLiteStore {
    public func replayDeadLetters(
        _ filter: DeadLetterFilter, limit: Int, now: Int64, ttl: Duration, deviceCap: Int
    ) throws(StoreError) -> ReplayBatch {
        try write { db in
            let letters = try Self.deadLetters(filter, limit: limit, db)
            // One row at a time: whether a replayed job becomes its device's head depends on the rows before it.
            // It is stored again under a new id and its device's next number, so it queues behind every job its
            // device already has (acceptance order; keeping the old id put replayed jobs ahead of newer ones). A
            // dead letter whose device is gone (left by a binary older than schema 12) is not requeued, only removed.
            // Its badge is the device's count now: it is delivered after every job the device has, and carries the
            // last word on the badge (the count it was first stored with would set the phone back).
            let requeue = try db.statement(
                """
                INSERT INTO jobs (public_id, device_id, state, payload, created_at, scheduled_at, expires_at,
                                  reports_outcome, folded, folded_count, badge, device_seq)
                SELECT public_id, device_id,
                       CASE WHEN EXISTS (SELECT 1 FROM jobs h WHERE h.device_id = old.device_id AND \(Self.isHead("h")))
                            THEN 'pending' ELSE 'available' END,
                       payload, created_at, ?1, ?2, 0, folded, folded_count,
                       \(Self.downMonitors("old.device_id", since: "?4")), d.next_seq
                FROM jobs old JOIN devices d ON d.id = old.device_id
                WHERE old.id = ?3 AND old.state = 'discarded' AND d.live_jobs < ?5
                """)
            let remove = try db.statement("DELETE FROM jobs WHERE id = ? AND state = 'discarded'")
            let deviceExists = try db.statement("SELECT 1 FROM jobs old JOIN devices d ON d.id = old.device_id WHERE old.id = ?")
            var count = 0
            var left = 0
            for (id, _) in letters {
                let replayed = try requeue.run([
                    .integer(now), .integer(now + ttl.wholeMilliseconds), .integer(id), .integer(now - options.monitorRetention.wholeMilliseconds),
                    .integer(Int64(min(deviceCap, Int(Int64.max))))
                ])
                // Not requeued: its device is at its cap (it stays a dead letter), or gone (it is only removed).
                if replayed == 0, try !deviceExists.rows([.integer(id)], { _ in true }).isEmpty {
                    left += 1
                    continue
                }
                count += replayed
                try remove.run([.integer(id)])
            }
            return ReplayBatch(replayed: count, leftAtCap: left, lastExamined: letters.last?.id)
        }
    }
}
