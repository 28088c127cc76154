internal import CMicroHTTPD
import Common
import Foundation

/// Conversions between `IPAddress` and the C `sockaddr` structures libmicrohttpd speaks.
enum SocketAddress {
    /// Calls `body` with a `sockaddr_in`/`sockaddr_in6` for `address` and `port`, valid only during the call.
    static func withSockaddr<T>(_ address: IPAddress, port: UInt16, _ body: (UnsafePointer<sockaddr>) -> T) -> T {
        if address.isIPv4 {
            var v4 = sockaddr_in()
            v4.sin_family = sa_family_t(AF_INET)
            v4.sin_port = port.bigEndian
            withUnsafeMutableBytes(of: &v4.sin_addr) { $0.copyBytes(from: address.bytes) }
            return withUnsafePointer(to: &v4) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1, body) }
        }
        var v6 = sockaddr_in6()
        v6.sin6_family = sa_family_t(AF_INET6)
        v6.sin6_port = port.bigEndian
        withUnsafeMutableBytes(of: &v6.sin6_addr) { $0.copyBytes(from: address.bytes) }
        return withUnsafePointer(to: &v6) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1, body) }
    }

    /// The address in a C `sockaddr` (IPv4 or IPv6), or nil for other families.
    static func address(of pointer: UnsafePointer<sockaddr>?) -> IPAddress? {
        guard let pointer else { return nil }
        switch Int32(pointer.pointee.sa_family) {
        case AF_INET:
            return pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { v4 in
                var raw = v4.pointee.sin_addr
                return IPAddress(bytes: withUnsafeBytes(of: &raw) { Array($0) })
            }
        case AF_INET6:
            return pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { v6 in
                var raw = v6.pointee.sin6_addr
                let bytes = withUnsafeBytes(of: &raw) { Array($0) }
                // Fold IPv4-mapped addresses (dual-stack listeners) to IPv4, as IPAddress(String) does.
                let mapped: [UInt8] = Array(repeating: 0, count: 10) + [0xff, 0xff]
                return IPAddress(bytes: Array(bytes.prefix(12)) == mapped ? Array(bytes.suffix(4)) : bytes)
            }
        default:
            return nil
        }
    }

    /// The address and port a socket is bound to (getsockname), or nil when it is not an IP socket.
    static func local(of descriptor: Int32) -> (address: IPAddress, port: UInt16)? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let found = withUnsafeMutablePointer(to: &storage) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) == 0 }
        }
        guard found else { return nil }
        return withUnsafePointer(to: &storage) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address -> (IPAddress, UInt16)? in
                guard let ip = self.address(of: address) else { return nil }
                let port: UInt16 =
                    Int32(address.pointee.sa_family) == AF_INET
                    ? address.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin_port) }
                    : address.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin6_port) }
                return (ip, port)
            }
        }
    }
}
