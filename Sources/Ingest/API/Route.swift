/// The routes of SPEC §2, matched below `BASE_PATH`.
public enum Route: Equatable, Sendable {
    case register
    case device(id: String)
    case webhook(deviceID: String)
    case health

    /// The route as logs and metrics name it: never the concrete path, which holds a device id.
    public var pattern: String {
        switch self {
        case .register: return "/devices"
        case .device: return "/devices/:id"
        case .webhook: return "/wh/:deviceId"
        case .health: return "/health"
        }
    }

    public var allowedMethods: [String] {
        switch self {
        case .register: return ["POST"]
        case .device: return ["GET", "PATCH", "DELETE"]
        case .webhook: return ["POST", "GET"]
        case .health: return ["GET"]
        }
    }

    /// Matches a request path, given the mount prefix ("" or `/relay`).
    public static func match(_ path: String, basePath: String) -> Route? {
        guard path.hasPrefix(basePath) else { return nil }
        let relative = path.dropFirst(basePath.count)
        let parts = relative.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.first == "" else { return nil }
        switch (parts.count, parts.dropFirst().first) {
        case (2, "devices"): return .register
        case (2, "health"): return .health
        case (3, "devices") where !parts[2].isEmpty: return .device(id: String(parts[2]))
        case (3, "wh") where !parts[2].isEmpty: return .webhook(deviceID: String(parts[2]))
        default: return nil
        }
    }
}
