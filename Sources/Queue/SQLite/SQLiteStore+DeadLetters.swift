import Common
import SQLiteDriver

/// SQLite's half of `replayDeadLetters` (SharedQueries+DeadLetters.swift).
extension SQLiteStore {
    var monitorRetention: Duration { options.monitorRetention }

    /// Nothing: the writer's transaction holds the whole database.
    func prepareReplay(of devices: Set<String>, _ db: SQLiteConnection) {}

    /// The job is counted live on its device, and the device's next number moved past the one it takes, as
    /// `enqueue` does (the writer fires no trigger). (Found by their text in the connection's cache once a row: a
    /// replay is an operator's command, not a hot path.)
    func requeue(_ letter: DeadLetterRef, _ replay: DeadLetterReplay, _ db: SQLiteConnection) throws -> Bool {
        let requeued =
            try db.statement(
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
                """
            ).run([.integer(replay.now), .integer(replay.expiresAt), .integer(letter.id), .integer(replay.badgeSince), .integer(replay.deviceCap)])
            == 1
        if requeued {
            try db.statement("UPDATE devices SET live_jobs = live_jobs + 1, next_seq = next_seq + 1 WHERE id = ?").run([.text(letter.device)])
        }
        return requeued
    }
}
