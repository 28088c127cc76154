/// What support needs to answer "why didn't my alert arrive?" (SPEC §5 `device show`, `dead-letters list`): states,
/// reasons, times and counts — never a notification's content, and the token only as the caller chooses to cut it.

/// One device's story.
public struct DeviceSummary: Sendable, Equatable {
    public var device: Device
    /// The APNs environment learnt for its token (`production`, `sandbox`), nil until one was learnt.
    public var environment: String?
    /// Live jobs: its head and the jobs waiting behind it.
    public var liveJobs: Int
    /// Acceptance time of its oldest live job (its head), if any.
    public var oldestLiveJobAt: Int64?
    public var deadLettersByReason: [String: Int]
}

/// A dead letter as support sees it: whose, why, when, after how many attempts.
public struct DeadLetter: Sendable, Equatable {
    public var id: Int64
    /// The id the webhook was answered with (and `apns-id`).
    public var publicID: String
    public var deviceID: String
    public var reason: String
    public var attempts: Int
    public var acceptedAt: Int64
    public var deadAt: Int64
}

/// The store calls of the admin commands.
public protocol SupportQueries: Sendable {
    /// The device's story, or nil when there is no such device.
    func deviceSummary(id: String) throws(StoreError) -> DeviceSummary?
    /// Up to `limit` matching dead letters, oldest first.
    func listDeadLetters(_ filter: DeadLetterFilter, limit: Int) throws(StoreError) -> [DeadLetter]
    /// Deletes the matching dead letters now. Returns how many.
    func purgeDeadLetters(_ filter: DeadLetterFilter) throws(StoreError) -> Int
    /// An operator's delete (a user's erasure request): the device and every job it has go, and a tombstone with
    /// `reason` makes its webhook URL answer 410. False when there was no such device.
    func eraseDevice(id: String, reason: String, now: Int64) throws(StoreError) -> Bool
}
