import Common

extension PostgresStore {
    public func replayDeadLetters(
        _ filter: DeadLetterFilter, limit: Int, now: Int64, ttl: Duration, deviceCap: Int
    ) throws(StoreError) -> ReplayBatch {
        try write { db in
            let letters = try Self.deadLetters(filter, limit: limit, db)
            // Whether a replayed job becomes its device's head depends on the device's other jobs: lock the devices.
            Self.lockDevices(Set(letters.map(\.device)), db)
            // One row at a time: whether a replayed job becomes its device's head depends on the rows before it.
            // It is stored again under a new id, so it queues behind every job its device already has (ids are
            // acceptance order; keeping the old id would put replayed jobs ahead of newer ones). Its badge is the
            // device's count now, as it is delivered last (the count it was first stored with would set the phone back).
            var count = 0
            var left = 0
            for (id, device) in letters {
                let replayed = try db.run(
                    """
                    INSERT INTO jobs (public_id, device_id, state, payload, created_at, scheduled_at, expires_at,
                                      reports_outcome, folded, folded_count, badge)
                    SELECT public_id, device_id,
                           CASE WHEN EXISTS (SELECT 1 FROM jobs h WHERE h.device_id = old.device_id
                                             AND h.state IN ('available', 'running', 'retryable'))
                                THEN 'pending' ELSE 'available' END,
                           payload, created_at, $1::bigint, $2::bigint, false, folded, folded_count,
                           (SELECT count(*) FROM monitor_states m
                            WHERE m.device_id = old.device_id AND m.down AND m.updated_at >= $4::bigint)::integer
                    FROM jobs old JOIN devices d ON d.id = old.device_id
                    WHERE old.id = $3::bigint AND old.state = 'discarded' AND d.live_jobs < $5::bigint
                    """,
                    [
                        .integer(now), .integer(now + ttl.wholeMilliseconds), .integer(id),
                        .integer(now - options.monitorRetention.wholeMilliseconds), .integer(Int64(min(deviceCap, Int(Int64.max))))
                    ])
                if replayed > 0 {
                    db.runDeferred("UPDATE devices SET live_jobs = live_jobs + 1 WHERE id = $1::text", [.text(device)])
                } else if try !db.rows("SELECT 1 FROM devices WHERE id = $1::text", [.text(device)], { _ in true }).isEmpty {
                    // Its device is at its cap: it stays a dead letter (a device that is gone only loses it).
                    left += 1
                    continue
                }
                count += replayed
                try db.run("DELETE FROM jobs WHERE id = $1::bigint AND state = 'discarded'", [.integer(id)])
            }
            if count > 0 { Self.notifyDeliverers(db) }
            return ReplayBatch(replayed: count, leftAtCap: left, lastExamined: letters.last?.id)
        }
    }
}
