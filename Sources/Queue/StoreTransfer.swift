/// Rows as `kumapush-relay migrate-store` moves them from one store to another: every column, including those the
/// `RelayStore` protocols keep to themselves, so the relay carries on where it stopped (same device ids, so the
/// webhook URLs keep working; same job ids, so acceptance order holds).
public enum StoreTransfer {
    public struct DeviceRow: Sendable, Equatable {
        public var device: Device
        /// The APNs environment the token is known to belong to; nil: the configured one.
        public var apnsEnvironment: String?
    }

    public struct MonitorStateRow: Sendable, Equatable {
        public var deviceID: String
        public var monitor: String
        public var down: Bool
        public var updatedAt: Int64
    }

    public struct JobRow: Sendable, Equatable {
        public var id: Int64
        public var publicID: String
        public var deviceID: String
        public var state: JobState
        public var payload: [UInt8]
        public var attempt: Int
        public var createdAt: Int64
        public var scheduledAt: Int64
        public var expiresAt: Int64
        public var lastError: String
        public var finalizedAt: Int64?
        public var reportsOutcome: Bool
        public var folded: [UInt8]?
        public var foldedCount: Int
        public var badge: Int?
    }

    /// How much a source holds, for the progress bar.
    public struct Counts: Sendable, Equatable {
        public var devices: Int
        public var tombstones: Int
        public var monitorStates: Int
        public var jobs: Int
    }
}
