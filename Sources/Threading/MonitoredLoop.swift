/// A loop of the process that liveness watches (`/livez`, systemd's watchdog): its name and how long it has gone
/// without a turn.
public struct MonitoredLoop: Sendable {
    public let name: String
    public let silence: @Sendable () -> Duration

    public init(name: String, silence: @escaping @Sendable () -> Duration) {
        self.name = name
        self.silence = silence
    }

    public init(name: String, heartbeat: Heartbeat) {
        self.init(name: name) { heartbeat.age }
    }

    /// The names of the loops silent for longer than `limit`: wedged, not idle (an idle loop still turns).
    public static func wedged(_ loops: [MonitoredLoop], limit: Duration) -> [String] {
        loops.filter { $0.silence() > limit }.map(\.name)
    }
}
