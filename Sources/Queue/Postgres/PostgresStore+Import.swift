import Common
import PostgresDriver

/// Writing rows moved from another store (`migrate-store`, the target side of `StoreTransfer`). Each call is one
/// transaction and skips rows already here, so an interrupted migration can simply run again.
extension PostgresStore {
    /// Rows per INSERT statement (at most 15 parameters a row; PostgreSQL allows 65,535 per statement).
    static let importChunk = 500

    /// Adds devices not here yet (by id or token). Returns how many were added.
    public func importDevices(_ rows: [StoreTransfer.DeviceRow]) throws(StoreError) -> Int {
        try importRows(
            rows, into: "devices",
            columns: "id, device_token, auth_token_hash, date_added, last_successful_notification, "
                + "last_delivery_error, down_notification_level, apns_environment",
            types: ["text", "text", "text", "bigint", "bigint", "text", "text", "text"]
        ) { row in
            [
                .text(row.device.id), .text(row.device.token), .text(row.device.authTokenHash), .integer(row.device.dateAdded),
                .optional(row.device.lastSuccessfulNotification), .text(row.device.lastDeliveryError),
                .text(row.device.downNotificationLevel.rawValue), .optional(row.apnsEnvironment)
            ]
        }
    }

    public func importTombstones(_ rows: [Tombstone]) throws(StoreError) -> Int {
        try importRows(
            rows, into: "tombstones", columns: "device_id, reason, removed_at", types: ["text", "text", "bigint"]
        ) { [.text($0.deviceID), .text($0.reason), .integer($0.removedAt)] }
    }

    /// Monitor states of devices that are here (others were skipped with their device).
    public func importMonitorStates(_ rows: [StoreTransfer.MonitorStateRow]) throws(StoreError) -> Int {
        try importRows(
            rows, into: "monitor_states", columns: "device_id, monitor, down, updated_at", types: ["text", "text", "boolean", "bigint"],
            deviceColumn: 0
        ) {
            [.text($0.deviceID), .text($0.monitor), .boolean($0.down), .integer($0.updatedAt)]
        }
    }

    /// Adds jobs with their ids (acceptance order) and states. A job leased in the source (its relay was stopped
    /// mid-push) arrives as `retryable`, due at once, like a rescued lease. Jobs of devices that are not here, and
    /// ids already here, are skipped. Returns how many were added.
    public func importJobs(_ rows: [StoreTransfer.JobRow]) throws(StoreError) -> Int {
        try importRows(
            rows, into: "jobs",
            columns: "id, public_id, device_id, state, payload, attempt, created_at, scheduled_at, expires_at, "
                + "last_error, finalized_at, reports_outcome, folded, folded_count, badge",
            types: [
                "bigint", "text", "text", "text", "bytea", "integer", "bigint", "bigint", "bigint", "text", "bigint",
                "boolean", "bytea", "integer", "integer"
            ],
            deviceColumn: 2
        ) { job in
            let leased = job.state == .running
            return [
                .integer(job.id), .text(job.publicID), .text(job.deviceID), .text(leased ? JobState.retryable.rawValue : job.state.rawValue),
                .bytes(job.payload), .integer(Int64(job.attempt)), .integer(job.createdAt), .integer(job.scheduledAt),
                .integer(job.expiresAt), .text(leased ? "lease expired" : job.lastError), .optional(job.finalizedAt),
                .boolean(job.reportsOutcome), job.folded.map { .bytes($0) } ?? .null, .integer(Int64(job.foldedCount)),
                .optional(job.badge.map(Int64.init))
            ]
        }
    }

    /// The highest job id here: where an interrupted migration resumes.
    public func highestJobID() throws(StoreError) -> Int64 {
        try read { db in try db.rows("SELECT coalesce(max(id), 0) FROM jobs") { $0.int64(0) }.first ?? 0 }
    }

    /// After importing: new jobs get ids above every imported one, each device's live jobs are counted (no
    /// trigger counts inserted rows, migration 11), and deliverers look at the queue.
    public func finishImport() throws(StoreError) {
        _ = try write { db in
            try db.run("SELECT setval(pg_get_serial_sequence('jobs', 'id'), greatest((SELECT max(id) FROM jobs), 1))")
            try db.run(
                """
                UPDATE devices SET live_jobs = counted.live
                FROM (SELECT d.id, count(j.id) AS live FROM devices d
                      LEFT JOIN jobs j ON j.device_id = d.id AND j.state <> 'discarded' GROUP BY d.id) AS counted
                WHERE devices.id = counted.id AND devices.live_jobs <> counted.live
                """)
            Self.notifyDeliverers(db)
        }
    }

    /// Takes the statistics of the imported tables. A new database has none until autovacuum first gets to it, and
    /// until then PostgreSQL plans every statement from guesses, with a queue just moved in waiting to be delivered;
    /// its advice after a bulk load is ANALYZE (https://www.postgresql.org/docs/15/populate.html#POPULATE-ANALYZE).
    /// After `finishImport`, so the counts it wrote are in them; without the statement timeout, which is for the
    /// relay's own statements, not a scan of every table. A role that does not own a table gets a warning from
    /// PostgreSQL and that table is skipped (autovacuum takes its statistics later).
    public func analyzeImportedTables() throws(StoreError) {
        _ = try write { db in
            try db.execute("SET LOCAL statement_timeout = 0")
            try db.execute("ANALYZE devices, jobs, monitor_states, tombstones")
        }
    }

    /// One transaction of multi-row INSERTs, each skipping the rows already here. With `deviceColumn`, rows whose
    /// device (that column) is not in `devices` are left out by joining on it.
    private func importRows<Row>(
        _ rows: [Row], into table: String, columns: String, types: [String], deviceColumn: Int? = nil,
        values: (Row) -> [PGValue]
    ) throws(StoreError) -> Int {
        guard !rows.isEmpty else { return 0 }
        let names = columns.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        var statements: [(String, [PGValue])] = []
        for start in stride(from: 0, to: rows.count, by: Self.importChunk) {
            var parameters: [PGValue] = []
            var tuples: [String] = []
            for row in rows[start..<min(rows.count, start + Self.importChunk)] {
                let first = parameters.count + 1
                tuples.append("(" + types.enumerated().map { "$\(first + $0.offset)::\($0.element)" }.joined(separator: ", ") + ")")
                parameters += values(row)
            }
            let source = "(VALUES \(tuples.joined(separator: ", "))) AS v (\(names.joined(separator: ", ")))"
            let selected = deviceColumn.map { "SELECT v.* FROM \(source) JOIN devices d ON d.id = v.\(names[$0])" } ?? "SELECT * FROM \(source)"
            statements.append(("INSERT INTO \(table) (\(columns)) \(selected) ON CONFLICT DO NOTHING", parameters))
        }
        return try write { db in
            try statements.reduce(0) { total, statement in total + (try db.run(statement.0, statement.1, prepare: false)) }
        }
    }
}
