extension QueueStats {
    /// The counts `stats()` returns, read the same way on both stores: `query` runs each statement (plain SQL both
    /// dialects take as written, every one a full scan) and returns its rows as a text key and a number.
    static func counted(by query: (_ sql: String) throws -> [(key: String, number: Int64?)]) throws -> QueueStats {
        func total(_ table: String) throws -> Int { Int(try query("SELECT '', count(*) FROM \(table)").first?.number ?? 0) }
        func byKey(_ sql: String) throws -> [String: Int] {
            Dictionary(try query(sql).map { ($0.key, Int($0.number ?? 0)) }, uniquingKeysWith: +)
        }
        let states = try byKey("SELECT state, count(*) FROM jobs GROUP BY state")
        return QueueStats(
            devices: try total("devices"), tombstones: try total("tombstones"),
            jobsByState: Dictionary(states.compactMap { key, count in JobState(rawValue: key).map { ($0, count) } }, uniquingKeysWith: +),
            deadLettersByReason: try byKey("SELECT last_error, count(*) FROM jobs WHERE state = 'discarded' GROUP BY last_error"),
            oldestJobCreatedAt: try query("SELECT '', min(created_at) FROM jobs WHERE state <> 'discarded'").first?.number ?? nil)
    }
}
