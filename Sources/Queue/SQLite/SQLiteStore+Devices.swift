import Common

extension SQLiteStore {
    public func registerDevice(token: String, authTokenHash: String, now: Int64, newID: () throws -> String) throws(StoreError) -> Registration {
        try DeviceRegistration.register(newID: newID) { candidate throws(StoreError) in
            let values: [SQLiteValue] = [.text(candidate), .text(token), .text(authTokenHash), .integer(now)]
            return try write { db in
                let insert = try db.statement(DeviceRegistration.insert(values: "?1, ?2, ?3, ?4"))
                do {
                    return try insert.rows(values, Device.init(row:))
                } catch let error as SQLiteError where error.isPrimaryKeyViolation {
                    // A known token is no conflict (ON CONFLICT updates it): the one constraint left is the id's.
                    return nil
                }
            }
        }
    }

    public func device(id: String) throws(StoreError) -> Device? {
        try read { db in
            try db.statement("SELECT \(Device.columns) FROM devices WHERE id = ?").rows([.text(id)], Device.init(row:)).first
        }
    }

    public func updateDevice(id: String, token: String?, level: Device.DownNotificationLevel?) throws(StoreError) -> Device? {
        try write { db in
            // A new token is a new phone or a reinstall: the old token's delivery error no longer applies.
            do {
                return try db.statement(
                    """
                    UPDATE devices SET
                        last_delivery_error = CASE WHEN ?1 IS NOT NULL AND ?1 != device_token THEN '' ELSE last_delivery_error END,
                        apns_environment = CASE WHEN ?1 IS NOT NULL AND ?1 != device_token THEN NULL ELSE apns_environment END,
                        device_token = coalesce(?1, device_token),
                        down_notification_level = coalesce(?2, down_notification_level)
                    WHERE id = ?3
                    RETURNING \(Device.columns)
                    """
                ).rows([.optional(token), .optional(level?.rawValue), .text(id)], Device.init(row:)).first
            } catch let error as SQLiteError where error.isUniqueViolation {
                // The id is not changed, so the one UNIQUE constraint this can break is device_token's.
                throw StoreError(.tokenConflict, "device token already registered")
            }
        }
    }

    public func setEnvironment(deviceID: String, token: String, environment: Settings.APNsEnvironment) throws(StoreError) {
        // Only while the device still has the token the environment was learnt for.
        _ = try write { db in
            try db.statement("UPDATE devices SET apns_environment = ? WHERE id = ? AND device_token = ?")
                .run([.text(environment.rawValue), .text(deviceID), .text(token)])
        }
    }

    public func deleteDevice(id: String, now: Int64) throws(StoreError) -> Bool {
        try write { db in try DeviceDeletion.deletedByApp(at: now).apply(to: id, in: SQLiteDeviceDeletion(db: db)) }
    }

    public func importDevice(_ device: Device) throws(StoreError) -> Bool {
        try write { db in
            try db.statement(
                """
                INSERT OR IGNORE INTO devices (id, device_token, auth_token_hash, date_added, last_successful_notification,
                                               down_notification_level)
                VALUES (?, ?, ?, ?, ?, ?)
                """
            ).run([
                .text(device.id), .text(device.token), .text(device.authTokenHash), .integer(device.dateAdded),
                .optional(device.lastSuccessfulNotification), .text(device.downNotificationLevel.rawValue)
            ]) == 1
        }
    }

    public func hasDevice(id: String, orToken token: String) throws(StoreError) -> Bool {
        try read { db in
            try db.statement("SELECT EXISTS (SELECT 1 FROM devices WHERE id = ? OR device_token = ?)")
                .rows([.text(id), .text(token)]) { $0.int64(0) == 1 }.first ?? false
        }
    }

    public func tombstone(deviceID: String) throws(StoreError) -> Tombstone? {
        try read { db in
            try db.statement("SELECT device_id, reason, removed_at FROM tombstones WHERE device_id = ?")
                .rows([.text(deviceID)]) { Tombstone(deviceID: $0.text(0), reason: $0.text(1), removedAt: $0.int64(2)) }.first
        }
    }

    public func purgeTombstones(before: Int64) throws(StoreError) -> Int {
        try write { db in
            // Monitors silent as long as a tombstone is kept are forgotten with the same clock (TOMBSTONE_RETENTION).
            try db.statement("DELETE FROM monitor_states WHERE updated_at < ?").run([.integer(before)])
            return try db.statement("DELETE FROM tombstones WHERE removed_at < ?").run([.integer(before)])
        }
    }
}

extension SQLiteRow: ResultRow {}
