import Common

/// The device statements both stores run as written (`SharedQueries`).
extension SharedQueries {
    public func device(id: String) throws(StoreError) -> Device? {
        try read { db in try db.query("SELECT \(Device.columns) FROM devices WHERE id = $1::text", [.text(id)]) { Device(row: $0) }.first }
    }

    public func setEnvironment(deviceID: String, token: String, environment: Settings.APNsEnvironment) throws(StoreError) {
        // Only while the device still has the token the environment was learnt for.
        _ = try writeStatement { db in
            try db.change(
                "UPDATE devices SET apns_environment = $1::text WHERE id = $2::text AND device_token = $3::text",
                [.text(environment.rawValue), .text(deviceID), .text(token)])
        }
    }

    public func importDevice(_ device: Device) throws(StoreError) -> Bool {
        try writeStatement { db in
            try db.change(
                """
                INSERT INTO devices (id, device_token, auth_token_hash, date_added, last_successful_notification,
                                     down_notification_level)
                VALUES ($1::text, $2::text, $3::text, $4::bigint, $5::bigint, $6::text)
                ON CONFLICT DO NOTHING
                """,
                [
                    .text(device.id), .text(device.token), .text(device.authTokenHash), .integer(device.dateAdded),
                    .optional(device.lastSuccessfulNotification), .text(device.downNotificationLevel.rawValue)
                ]) == 1
        }
    }

    public func hasDevice(id: String, orToken token: String) throws(StoreError) -> Bool {
        try read { db in
            try db.query("SELECT EXISTS (SELECT 1 FROM devices WHERE id = $1::text OR device_token = $2::text)", [.text(id), .text(token)]) {
                $0.bool(0)
            }.first ?? false
        }
    }

    public func tombstone(deviceID: String) throws(StoreError) -> Tombstone? {
        try read { db in
            try db.query("SELECT device_id, reason, removed_at FROM tombstones WHERE device_id = $1::text", [.text(deviceID)]) {
                Tombstone(deviceID: $0.text(0), reason: $0.text(1), removedAt: $0.int64(2))
            }.first
        }
    }

    public func purgeTombstones(before: Int64) throws(StoreError) -> Int {
        try write { db in
            // Monitors silent as long as a tombstone is kept are forgotten with the same clock (TOMBSTONE_RETENTION).
            _ = try db.change("DELETE FROM monitor_states WHERE updated_at < $1::bigint", [.integer(before)])
            return try db.change("DELETE FROM tombstones WHERE removed_at < $1::bigint", [.integer(before)])
        }
    }
}
