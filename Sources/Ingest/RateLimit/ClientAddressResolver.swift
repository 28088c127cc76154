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
        guard let peer = request.peer else { return "unknown" }
        guard behindProxy, isTrusted(peer), let header = request.header(headerName) else { return peer.description }
        let hops = header.split(separator: ",").map { $0.trimmingWhitespace() }.filter { !$0.isEmpty }
        for hop in hops.reversed() {
            // Anything that is not an address ends the chain of trust: the proxy itself did not write it.
            guard let address = IPAddress(hop) else { return peer.description }
            if !isTrusted(address) { return address.description }
        }
        return hops.first.flatMap { IPAddress($0)?.description } ?? peer.description
    }
}
