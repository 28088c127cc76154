/// SPEC §3 alert storms, the part both stores share: how a device's pushes in the last minute are counted, in the
/// database so that every deliverer sees the same count (migration 8).
enum DeviceBurst {
    static let windowMillis: Int64 = 60_000

    /// SET clauses for a device one of whose pushes APNs just accepted at `now` (an SQL expression); every
    /// reference is to the row as it was before the update, in both SQLite and PostgreSQL.
    static func recordPush(now: String) -> String {
        """
        burst_count = CASE WHEN burst_started_at > \(now) - \(windowMillis) THEN burst_count + 1 ELSE 1 END,
        burst_started_at = CASE WHEN burst_started_at > \(now) - \(windowMillis) THEN burst_started_at ELSE \(now) END
        """
    }

    /// The device's pushes in the current window as of `now` (an SQL expression; `d` is the devices row).
    static func recentPushes(now: String) -> String {
        "CASE WHEN d.burst_started_at > \(now) - \(windowMillis) THEN d.burst_count ELSE 0 END"
    }
}
