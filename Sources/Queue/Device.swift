/// A registered iPhone: the APNs device token it pushes to and what the app configured.
public struct Device: Sendable, Equatable {
    public enum DownNotificationLevel: String, Sendable, CaseIterable {
        case normal
        case timeSensitive = "time-sensitive"
    }

    public var id: String
    /// Lower-case hex.
    public var token: String
    /// SHA-256 hex of the current auth token; "" for a device that has none (never matches).
    public var authTokenHash: String
    /// Milliseconds since 1970.
    public var dateAdded: Int64
    public var lastSuccessfulNotification: Int64?
    /// The last APNs rejection reason for this device, "" after a success.
    public var lastDeliveryError: String
    public var downNotificationLevel: DownNotificationLevel

    public init(
        id: String, token: String, authTokenHash: String, dateAdded: Int64, lastSuccessfulNotification: Int64? = nil,
        lastDeliveryError: String = "", downNotificationLevel: DownNotificationLevel = .normal
    ) {
        self.id = id
        self.token = token
        self.authTokenHash = authTokenHash
        self.dateAdded = dateAdded
        self.lastSuccessfulNotification = lastSuccessfulNotification
        self.lastDeliveryError = lastDeliveryError
        self.downNotificationLevel = downNotificationLevel
    }
}

/// The result of `POST /devices`: the device and whether it was new.
public struct Registration: Sendable, Equatable {
    public var device: Device
    public var created: Bool
}

/// A device APNs reported as gone, remembered so its webhook answers 410 instead of 404.
public struct Tombstone: Sendable, Equatable {
    public var deviceID: String
    public var reason: String
    public var removedAt: Int64

    public init(deviceID: String, reason: String, removedAt: Int64) {
        self.deviceID = deviceID
        self.reason = reason
        self.removedAt = removedAt
    }
}
