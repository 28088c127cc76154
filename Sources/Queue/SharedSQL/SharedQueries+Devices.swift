import Common

/// The device statements both stores run as written (`SharedQueries`).
extension SharedQueries {
    public func registerDevice(token: String, authTokenHash: String, now: Int64, newID: () throws -> String) throws(StoreError) -> Registration {
        try DeviceRegistration.register(newID: newID) { candidate throws(StoreError) in
            try write { db -> [Device]? in
                do {
                    return try db.query(DeviceRegistration.insert, [.text(candidate), .text(token), .text(authTokenHash), .integer(now)]) {
                        Device(row: $0)
                    }
                } catch  where isDuplicate(error, .id) {
                    // A known token is no conflict (ON CONFLICT updates it): the id is taken, and another is tried.
                    // (PostgreSQL aborted the transaction: its COMMIT is a rollback.)
                    return nil
                }
            }
        }
    }

    public func updateDevice(id: String, token: String?, level: Device.DownNotificationLevel?) throws(StoreError) -> Device? {
        // Out of the transaction before throwing: PostgreSQL's is aborted, and ends as a rollback.
        let update = try write { db -> DeviceUpdate in
            do {
                // A new token is a new phone or a reinstall: the old token's delivery error no longer applies.
                return .updated(
                    try db.query(
                        """
                        UPDATE devices SET
                            last_delivery_error = CASE WHEN $1::text IS NOT NULL AND $1::text <> device_token THEN '' ELSE last_delivery_error END,
                            apns_environment = CASE WHEN $1::text IS NOT NULL AND $1::text <> device_token THEN NULL ELSE apns_environment END,
                            device_token = coalesce($1::text, device_token),
                            down_notification_level = coalesce($2::text, down_notification_level)
                        WHERE id = $3::text
                        RETURNING \(Device.columns)
                        """, [.optional(token), .optional(level?.rawValue), .text(id)]
                    ) { Device(row: $0) }.first)
            } catch  where isDuplicate(error, .token) {
                return .tokenTaken
            }
        }
        switch update {
        case .updated(let device): return device
        case .tokenTaken: throw StoreError(.tokenConflict, "device token already registered")
        }
    }

    public func deleteDevice(id: String, now: Int64) throws(StoreError) -> Bool {
        try write { db in try DeviceDeletion.deletedByApp(at: now).apply(to: id, in: deletion(in: db)) }
    }

    public func eraseDevice(id: String, reason: String, now: Int64) throws(StoreError) -> Bool {
        try write { db in try DeviceDeletion.erased(reason: reason, at: now).apply(to: id, in: deletion(in: db)) }
    }

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
        // In a transaction, which PostgreSQL runs again after a transient failure (`import-devices` moves thousands).
        try write { db in
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

/// What `updateDevice`'s transaction found: the device (nil when there is none), or its new token taken.
private enum DeviceUpdate: Sendable {
    case updated(Device?)
    case tokenTaken
}
