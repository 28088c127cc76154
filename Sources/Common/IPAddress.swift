#if canImport(Glibc)
    import Glibc
#endif

/// An IPv4 or IPv6 address as its raw network-order bytes (4 or 16 of them).
/// IPv4-mapped IPv6 addresses (`::ffff:1.2.3.4`) are folded to IPv4 so one client has one key.
public struct IPAddress: Sendable, Hashable, CustomStringConvertible {
    public let bytes: [UInt8]

    public init?(_ text: String) {
        var v4 = in_addr()
        var v6 = in6_addr()
        let trimmed = text.trimmingWhitespace()
        if inet_pton(AF_INET, trimmed, &v4) == 1 {
            bytes = withUnsafeBytes(of: &v4) { Array($0) }
        } else if inet_pton(AF_INET6, trimmed, &v6) == 1 {
            let raw = withUnsafeBytes(of: &v6) { Array($0) }
            let mappedPrefix: [UInt8] = Array(repeating: 0, count: 10) + [0xff, 0xff]
            bytes = Array(raw.prefix(12)) == mappedPrefix ? Array(raw.suffix(4)) : raw
        } else {
            return nil
        }
    }

    public init?(bytes: [UInt8]) {
        guard bytes.count == 4 || bytes.count == 16 else { return nil }
        self.bytes = bytes
    }

    public var isIPv4: Bool { bytes.count == 4 }

    public var description: String {
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        let family = isIPv4 ? AF_INET : AF_INET6
        let ok = bytes.withUnsafeBytes { raw in inet_ntop(family, raw.baseAddress, &buffer, socklen_t(buffer.count)) }
        guard ok != nil else { return "?" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    public static let loopbackV4 = IPAddress("127.0.0.1")!
    public static let loopbackV6 = IPAddress("::1")!
}

/// An address range in CIDR notation (`10.0.0.0/8`, `fd00::/8`); a bare address is a range of one.
public struct IPNetwork: Sendable, Hashable, CustomStringConvertible {
    public let address: IPAddress
    public let prefixLength: Int

    public init?(_ text: String) {
        let parts = text.trimmingWhitespace().split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 1 || parts.count == 2, let address = IPAddress(String(parts[0])) else { return nil }
        let maxLength = address.bytes.count * 8
        if parts.count == 2 {
            guard let length = Int(parts[1]), (0...maxLength).contains(length) else { return nil }
            prefixLength = length
        } else {
            prefixLength = maxLength
        }
        self.address = address
    }

    public init(single address: IPAddress) {
        self.address = address
        prefixLength = address.bytes.count * 8
    }

    public func contains(_ candidate: IPAddress) -> Bool {
        guard candidate.bytes.count == address.bytes.count else { return false }
        var remaining = prefixLength
        for (a, b) in zip(address.bytes, candidate.bytes) where remaining > 0 {
            let bits = min(8, remaining)
            let mask: UInt8 = bits == 8 ? 0xff : ~(0xff >> UInt8(bits))
            if a & mask != b & mask { return false }
            remaining -= bits
        }
        return true
    }

    public var description: String { "\(address)/\(prefixLength)" }
}

/// A `host:port` listener address (`127.0.0.1:9464`, `[::1]:9464`).
public struct ListenAddress: Sendable, Equatable, CustomStringConvertible {
    public var host: String
    public var port: UInt16

    public init(host: String, port: UInt16) {
        self.host = host
        self.port = port
    }

    public init?(_ text: String) {
        let trimmed = text.trimmingWhitespace()
        guard let colon = trimmed.lastIndex(of: ":"), let port = UInt16(trimmed[trimmed.index(after: colon)...])
        else { return nil }
        var host = String(trimmed[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard IPAddress(host) != nil else { return nil }
        self.init(host: host, port: port)
    }

    public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
}
