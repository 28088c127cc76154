import Common

/// Reading a SQLite store out in pages for `migrate-store` (the source side of `StoreTransfer`).
extension SQLiteStore {
    public func transferCounts() throws(StoreError) -> StoreTransfer.Counts {
        try read { db in
            func count(_ table: String) throws -> Int { try db.statement("SELECT count(*) FROM \(table)").rows { $0.int(0) }.first ?? 0 }
            return StoreTransfer.Counts(
                devices: try count("devices"), tombstones: try count("tombstones"),
                monitorStates: try count("monitor_states"), jobs: try count("jobs"))
        }
    }

    /// Jobs with an id up to `id` (the part of a migration already done).
    public func countJobs(through id: Int64) throws(StoreError) -> Int {
        try read { db in try db.statement("SELECT count(*) FROM jobs WHERE id <= ?").rows([.integer(id)]) { $0.int(0) }.first ?? 0 }
    }

    /// Up to `limit` devices with an id above `after`, in id order.
    public func exportDevices(after: String, limit: Int) throws(StoreError) -> [StoreTransfer.DeviceRow] {
        try read { db in
            try db.statement(
                """
                SELECT \(Device.columns), apns_environment FROM devices WHERE id > ? ORDER BY id LIMIT ?
                """
            ).rows([.text(after), .integer(Int64(limit))]) { StoreTransfer.DeviceRow(device: Device(row: $0), apnsEnvironment: $0.optionalText(7)) }
        }
    }

    public func exportTombstones() throws(StoreError) -> [Tombstone] {
        try read { db in
            try db.statement("SELECT device_id, reason, removed_at FROM tombstones ORDER BY device_id").rows {
                Tombstone(deviceID: $0.text(0), reason: $0.text(1), removedAt: $0.int64(2))
            }
        }
    }

    public func exportMonitorStates() throws(StoreError) -> [StoreTransfer.MonitorStateRow] {
        try read { db in
            try db.statement("SELECT device_id, monitor, down, updated_at FROM monitor_states ORDER BY device_id, monitor").rows {
                StoreTransfer.MonitorStateRow(deviceID: $0.text(0), monitor: $0.text(1), down: $0.int(2) == 1, updatedAt: $0.int64(3))
            }
        }
    }

    /// Up to `limit` jobs (queued, leased and dead letters) with an id above `after`, in id order.
    public func exportJobs(after: Int64, limit: Int) throws(StoreError) -> [StoreTransfer.JobRow] {
        try read { db in
            try db.statement(
                """
                SELECT id, public_id, device_id, state, payload, attempt, created_at, scheduled_at, expires_at, last_error,
                       finalized_at, reports_outcome, folded, folded_count, badge
                FROM jobs WHERE id > ? ORDER BY id LIMIT ?
                """
            ).rows([.integer(after), .integer(Int64(limit))]) {
                StoreTransfer.JobRow(
                    id: $0.int64(0), publicID: $0.text(1), deviceID: $0.text(2),
                    state: JobState(rawValue: $0.text(3)) ?? .pending, payload: $0.blob(4), attempt: $0.int(5),
                    createdAt: $0.int64(6), scheduledAt: $0.int64(7), expiresAt: $0.int64(8),
                    lastError: $0.text(9), finalizedAt: $0.optionalInt64(10), reportsOutcome: $0.int(11) == 1,
                    folded: $0.isNull(12) ? nil : $0.blob(12), foldedCount: $0.int(13),
                    badge: $0.isNull(14) ? nil : $0.int(14))
            }
        }
    }
}
