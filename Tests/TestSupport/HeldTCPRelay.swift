import Foundation
import Synchronization

/// A loopback TCP relay to a local port that accepts one connection and opens its own to the target at once, but
/// forwards nothing until `release()`: the target holds a connection between TCP and TLS for as long as a test
/// needs, to ask of a server what it does before a handshake can finish.
public final class HeldTCPRelay: Sendable {
    public let port: UInt16
    private let listener: Int32
    private let released = DispatchSemaphore(value: 0)
    private let finished = DispatchGroup()
    /// The relayed connection's two sockets, so `stop()` can end a connection neither side closes.
    private let sockets = Mutex<[Int32]>([])

    public init(to target: UInt16) throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, length) == 0 && listen(fd, 1) == 0 && getsockname(fd, $0, &length) == 0
            }
        }
        guard bound else {
            close(fd)
            throw RelayError(message: "cannot listen: \(String(cString: strerror(errno)))")
        }
        listener = fd
        port = UInt16(bigEndian: address.sin_port)
        finished.enter()
        Thread { [self] in
            defer { finished.leave() }
            let client = accept(listener, nil, nil)
            guard client >= 0 else { return }
            let upstream = Self.connect(to: target)
            guard upstream >= 0 else {
                close(client)
                return
            }
            self.sockets.withLock { $0 = [client, upstream] }
            released.wait()
            // One pump a direction; whichever side ends shuts the other down, which ends the other pump.
            let pumps = DispatchGroup()
            for (from, to) in [(client, upstream), (upstream, client)] {
                pumps.enter()
                Thread {
                    Self.pump(from: from, to: to)
                    shutdown(from, Int32(SHUT_RDWR))
                    shutdown(to, Int32(SHUT_RDWR))
                    pumps.leave()
                }.start()
            }
            pumps.wait()
            self.sockets.withLock { $0 = [] }
            close(client)
            close(upstream)
        }.start()
    }

    /// Starts forwarding, both ways, what was held and what comes after.
    public func release() { released.signal() }

    /// Stops accepting and ends the relayed connection, if any; returns once its threads have ended.
    public func stop() {
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
        sockets.withLock { for fd in $0 { shutdown(fd, Int32(SHUT_RDWR)) } }
        released.signal()
        finished.wait()
    }

    private static func connect(to port: UInt16) -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            close(fd)
            return -1
        }
        return fd
    }

    private static func pump(from: Int32, to: Int32) {
        var buffer = [UInt8](repeating: 0, count: 16 * 1024)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(from, $0.baseAddress, $0.count) }
            guard count > 0 else { return }
            var sent = 0
            while sent < count {
                let n = buffer[sent..<count].withUnsafeBytes { Glibc.send(to, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                guard n > 0 else { return }
                sent += n
            }
        }
    }

    struct RelayError: Error { let message: String }
}
