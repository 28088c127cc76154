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

    public func deleteDevice(id: String, now: Int64) throws(StoreError) -> Bool {
        try write { db in try DeviceDeletion.deletedByApp(at: now).apply(to: id, in: SQLiteDeviceDeletion(db: db)) }
    }
}
