import Common

extension Device {
    /// The columns `init(row:)` reads, in its order, on both stores.
    static let columns =
        "id, device_token, auth_token_hash, date_added, last_successful_notification, last_delivery_error, down_notification_level"

    /// A device read from a row that starts with `columns`.
    init(row: some ResultRow) {
        self.init(
            id: row.text(0), token: row.text(1), authTokenHash: row.text(2), dateAdded: row.int64(3),
            lastSuccessfulNotification: row.optionalInt64(4), lastDeliveryError: row.text(5),
            downNotificationLevel: DownNotificationLevel(rawValue: row.text(6)) ?? .normal)
    }
}

/// `POST /devices` on either store: a fresh id for a new token, the existing device for a known one.
enum DeviceRegistration {
    /// Tries `insert` with up to five fresh ids. `insert` registers the token under the id it is given, or updates
    /// the device that has the token already, and returns nil only when the id is taken by another device. A fresh
    /// id collides with an existing one with probability ~n/2^84; retried a few times all the same.
    static func register(
        newID: () throws -> String, insert: (_ candidate: String) throws(StoreError) -> [Device]?
    ) throws(StoreError) -> Registration {
        for _ in 0..<5 {
            let candidate: String
            do { candidate = try newID() } catch { throw StoreError(.failed, "cannot generate a device id: \(error)") }
            guard let rows = try insert(candidate) else { continue }
            guard let device = rows.first else { throw StoreError(.failed, "register returned no row") }
            // A known token keeps its id: the device is new only when it has the id just drawn.
            return Registration(device: device, created: device.id == candidate)
        }
        throw StoreError(.failed, "cannot register: five fresh device ids were all taken")
    }

    /// The statement `insert` runs with the id, token, auth token hash and time: a known token is no conflict (its
    /// auth token is replaced, and the environment learnt for it forgotten).
    static let insert = """
        INSERT INTO devices (id, device_token, auth_token_hash, date_added) VALUES ($1::text, $2::text, $3::text, $4::bigint)
        ON CONFLICT (device_token) DO UPDATE SET auth_token_hash = excluded.auth_token_hash, apns_environment = NULL
        RETURNING \(Device.columns)
        """
}
