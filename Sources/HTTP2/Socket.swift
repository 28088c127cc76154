internal import CLinux
import Foundation

/// Thin non-blocking socket helpers. Errors are errno values turned into text at the call site.
enum Socket {
    struct Failure: Error, CustomStringConvertible {
        let description: String
        init(_ what: String, _ code: Int32 = errno) { description = "\(what): \(String(cString: strerror(code)))" }
    }

    /// Resolves `host` (a name or an IP literal) and starts a non-blocking connect. Blocking DNS: call it off
    /// the event loop. Returns the socket; completion is signalled by writability.
    static func startConnect(host: String, port: UInt16) throws -> Int32 {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_family = AF_UNSPEC
        var results: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(host, String(port), &hints, &results)
        guard status == 0, let first = results else {
            throw Failure("cannot resolve \(host)", status == EAI_SYSTEM ? errno : 0)
        }
        defer { freeaddrinfo(results) }
        let fd = socket(first.pointee.ai_family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw Failure("socket") }
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        if connect(fd, first.pointee.ai_addr, first.pointee.ai_addrlen) != 0 && errno != EINPROGRESS {
            let code = errno
            close(fd)
            throw Failure("connect to \(host):\(port)", code)
        }
        return fd
    }

    /// The outcome of a non-blocking connect once the socket is writable (0 = connected).
    static func pendingError(_ fd: Int32) -> Int32 {
        var error: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length)
        return error
    }

    /// A listening non-blocking socket on `host:port` (port 0 picks one). Returns (fd, bound port).
    static func listen(host: String, port: UInt16) throws -> (Int32, UInt16) {
        var v4 = sockaddr_in()
        var v6 = sockaddr_in6()
        let isV6 = inet_pton(AF_INET6, host, &v6.sin6_addr) == 1
        guard isV6 || inet_pton(AF_INET, host, &v4.sin_addr) == 1 else { throw Failure("not an IP address: \(host)", EINVAL) }
        let fd = socket(isV6 ? AF_INET6 : AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw Failure("socket") }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        let bound: Int32
        if isV6 {
            v6.sin6_family = sa_family_t(AF_INET6)
            v6.sin6_port = port.bigEndian
            bound = withUnsafePointer(to: &v6) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) }
            }
        } else {
            v4.sin_family = sa_family_t(AF_INET)
            v4.sin_port = port.bigEndian
            bound = withUnsafePointer(to: &v4) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
        }
        guard bound == 0, Glibc.listen(fd, 1024) == 0 else {
            let code = errno
            close(fd)
            throw Failure("cannot listen on \(host):\(port)", code)
        }
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        _ = withUnsafeMutablePointer(to: &storage) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        let actual = withUnsafePointer(to: &storage) { pointer -> UInt16 in
            isV6
                ? pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin6_port) }
                : pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin_port) }
        }
        return (fd, actual)
    }

    /// Makes `close` send a TCP reset instead of a FIN (SO_LINGER 0): test servers use it to break a connection the
    /// way a crashed peer or a middlebox does.
    static func resetOnClose(_ fd: Int32) {
        var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
    }

    /// Accepts one pending connection as a non-blocking socket, or nil when none is pending.
    static func accept(_ listener: Int32) -> Int32? {
        let fd = Glibc.accept(listener, nil, nil)
        guard fd >= 0 else { return nil }
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        return fd
    }
}
