import Common
import PostgresDriver

/// PostgreSQL's half of `replayDeadLetters` (SharedQueries+DeadLetters.swift).
extension PostgresStore {
    var monitorRetention: Duration { options.monitorRetention }

    /// Whether a replayed job becomes its device's head depends on the device's other jobs: the devices are locked
    /// first, as every writer that changes a device's head locks it (`lockDevices`).
    func prepareReplay(of devices: Set<String>, _ db: PGConnection) { Self.lockDevices(devices, db) }

    /// No trigger counts the job (migration 11): the device's live count is raised with it.
    func requeue(_ letter: DeadLetterRef, _ replay: DeadLetterReplay, _ db: PGConnection) throws -> Bool {
        let requeued =
            try db.run(
                """
                INSERT INTO jobs (public_id, device_id, state, payload, created_at, scheduled_at, expires_at,
                                  reports_outcome, folded, folded_count, badge)
                SELECT public_id, device_id,
                       CASE WHEN EXISTS (SELECT 1 FROM jobs h WHERE h.device_id = old.device_id AND \(Self.isHead("h")))
                            THEN 'pending' ELSE 'available' END,
                       payload, created_at, $1::bigint, $2::bigint, false, folded, folded_count,
                       (SELECT count(*) FROM monitor_states m
                        WHERE m.device_id = old.device_id AND m.down AND m.updated_at >= $4::bigint)::integer
                FROM jobs old JOIN devices d ON d.id = old.device_id
                WHERE old.id = $3::bigint AND old.state = 'discarded' AND d.live_jobs < $5::bigint
                """,
                [.integer(replay.now), .integer(replay.expiresAt), .integer(letter.id), .integer(replay.badgeSince), .integer(replay.deviceCap)]
            ) == 1
        if requeued {
            db.runDeferred("UPDATE devices SET live_jobs = live_jobs + 1 WHERE id = $1::text", [.text(letter.device)])
        }
        return requeued
    }
}
