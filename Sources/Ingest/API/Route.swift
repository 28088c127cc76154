/// The routes of SPEC §2, matched below `BASE_PATH`.
public enum Route: Equatable, Sendable {
    case register
    case device(id: String)
    case webhook(deviceID: String)
    /// Kept for existing probes: the same answer as `readyz`.
    case health
    case livez
    case readyz

    /// The route as logs and metrics name it: never the concrete path, which holds a device id.
    public var pattern: String {
        switch self {
        case .register: return "/devices"
        case .device: return "/devices/:id"
        case .webhook: return "/wh/:deviceId"
        case .health: return "/health"
        case .livez: return "/livez"
        case .readyz: return "/readyz"
        }
    }

    public var allowedMethods: [String] {
        switch self {
        case .register: return ["POST"]
        case .device: return ["GET", "PATCH", "DELETE"]
        case .webhook: return ["POST", "GET"]
        case .health, .livez, .readyz: return ["GET"]
        }
    }

    /// Health probes: asked every few seconds by balancers and systemd, so they are counted but not logged.
    public var isProbe: Bool { self == .health || self == .livez || self == .readyz }

    /// Matches a request path, given the mount prefix ("" or `/relay`).
    public static func match(_ path: String, basePath: String) -> Route? {
        guard path.hasPrefix(basePath) else { return nil }
        let relative = path.dropFirst(basePath.count)
        let parts = relative.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.first == "" else { return nil }
        switch (parts.count, parts.dropFirst().first) {
        case (2, "devices"): return .register
        case (2, "health"): return .health
        case (2, "livez"): return .livez
        case (2, "readyz"): return .readyz
        case (3, "devices") where !parts[2].isEmpty: return .device(id: String(parts[2]))
        case (3, "wh") where !parts[2].isEmpty: return .webhook(deviceID: String(parts[2]))
        default: return nil
        }
    }
}
