/// Host and port of an `https://host[:port]` base URL, as the APNs client dials it.
public struct APNsEndpoint: Sendable, Equatable {
    public var host: String
    public var port: UInt16

    public init(host: String, port: UInt16) {
        self.host = host
        self.port = port
    }

    public init?(_ url: String) {
        guard url.hasPrefix("https://") else { return nil }
        var rest = url.dropFirst("https://".count)
        if let slash = rest.firstIndex(of: "/") {
            guard rest[slash...].allSatisfy({ $0 == "/" }) else { return nil }
            rest = rest[..<slash]
        }
        if rest.hasPrefix("["), let close = rest.firstIndex(of: "]") {
            host = String(rest[rest.index(after: rest.startIndex)..<close])
            let after = rest[rest.index(after: close)...]
            if after.isEmpty {
                port = 443
            } else if after.hasPrefix(":"), let value = UInt16(after.dropFirst()), value > 0 {
                port = value
            } else {
                return nil
            }
        } else if let colon = rest.lastIndex(of: ":") {
            host = String(rest[..<colon])
            guard let value = UInt16(rest[rest.index(after: colon)...]), value > 0 else { return nil }
            port = value
        } else {
            host = String(rest)
            port = 443
        }
        guard !host.isEmpty, !host.contains(" ") else { return nil }
    }
}
