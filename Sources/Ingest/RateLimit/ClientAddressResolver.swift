import Common

/// Who the client is, for rate limits (SPEC §2.4): the TCP peer, unless `BEHIND_PROXY` is on and the peer is a
/// trusted proxy, in which case the right-most address in the proxy header that is not itself a trusted proxy.
public struct ClientAddressResolver: Sendable {
    public let behindProxy: Bool
    public let headerName: String
    public let trusted: [IPNetwork]

    public init(behindProxy: Bool, headerName: String, trustedProxies: [IPNetwork]) {
        self.behindProxy = behindProxy
        self.headerName = headerName.lowercased()
        self.trusted = [IPNetwork(single: .loopbackV4), IPNetwork(single: .loopbackV6)] + trustedProxies
    }

    public init(settings: Settings) {
        self.init(behindProxy: settings.behindProxy, headerName: settings.proxyHeader, trustedProxies: settings.trustedProxies)
    }

    func isTrusted(_ address: IPAddress) -> Bool { trusted.contains { $0.contains(address) } }

    /// The client's address as text ("unknown" without a peer, which only tests produce).
    public func clientAddress(for request: HTTPRequest) -> String {
        resolvedAddress(for: request)?.description ?? "unknown"
    }

    /// The client as logs and rate limits see it.
    public func client(for request: HTTPRequest) -> Client {
        guard let address = resolvedAddress(for: request) else { return Client(address: "unknown", limitKey: "unknown") }
        let text = address.description  // an IPv4 address is its own limit key: written once per request
        return Client(address: text, limitKey: address.isIPv4 ? text : Client.limitKey(address))
    }

    private func resolvedAddress(for request: HTTPRequest) -> IPAddress? {
        guard let peer = request.peer else { return nil }
        guard behindProxy, isTrusted(peer), let header = request.header(headerName) else { return peer }
        let hops = header.split(separator: ",").map { $0.trimmingWhitespace() }.filter { !$0.isEmpty }
        for hop in hops.reversed() {
            // Anything that is not an address ends the chain of trust: the proxy itself did not write it.
            guard let address = Self.address(ofHop: hop) else { return peer }
            if !isTrusted(address) { return address }
        }
        return hops.first.flatMap { Self.address(ofHop: $0) } ?? peer
    }

    /// A hop as proxies write it: an address, or with its port (`203.0.113.7:51234`, `[2001:db8::5]:443`, as Azure
    /// Application Gateway writes them). Refusing the port form made every client behind such a proxy the proxy
    /// itself: one shared key in every rate limit.
    static func address(ofHop hop: String) -> IPAddress? {
        if let address = IPAddress(hop) { return address }
        if hop.hasPrefix("["), let close = hop.firstIndex(of: "]") {
            // `[v6]` or `[v6]:port`, nothing else after the bracket.
            let after = hop[hop.index(after: close)...]
            guard after.isEmpty || (after.first == ":" && after.count > 1 && after.dropFirst().allSatisfy({ $0.isASCII && $0.isNumber }))
            else { return nil }
            return IPAddress(String(hop[hop.index(after: hop.startIndex)..<close]))
        }
        let parts = hop.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, !parts[1].isEmpty, parts[1].allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
        return IPAddress(String(parts[0]))
    }
}

/// A client as logs and rate limits see it.
public struct Client: Sendable, Equatable {
    /// The address as text, for logs.
    public let address: String
    /// What rate limits count by: an IPv4 address, or the /64 an IPv6 address lies in. A /64 is one subscriber's
    /// smallest usual allocation, so rotating addresses within it gains nothing (SPEC §2.4).
    public let limitKey: String

    public init(address: String, limitKey: String) {
        self.address = address
        self.limitKey = limitKey
    }

    public static func limitKey(_ address: IPAddress) -> String {
        guard !address.isIPv4 else { return address.description }
        let prefix = IPAddress(bytes: Array(address.bytes.prefix(8)) + Array(repeating: 0, count: 8)) ?? address
        return prefix.description + "/64"
    }
}
