/// A push as the user sees it, before it becomes APNs JSON.
public struct PushMessage: Sendable, Equatable {
    public enum InterruptionLevel: String, Sendable {
        case active
        case timeSensitive = "time-sensitive"
    }

    public var title: String
    public var body: String
    /// Text always shown whole after the body, even when the body is cut to fit (the late notice).
    public var bodySuffix: String = ""
    public var interruptionLevel: InterruptionLevel
    /// Groups a monitor's pushes on the phone; nil for tests and generic pushes.
    public var threadID: String?
    /// `aps.badge`: how many of the device's monitors are down as of this push (0 clears it); nil sends none.
    public var badge: Int?

    public init(title: String, body: String, interruptionLevel: InterruptionLevel = .active, threadID: String? = nil) {
        self.title = title
        self.body = body
        self.interruptionLevel = interruptionLevel
        self.threadID = threadID
    }

    /// The body as the phone shows it (before any cut for size).
    public var fullBody: String { body + bodySuffix }
}
