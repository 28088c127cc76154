internal import CMicroHTTPD
import Common
import Foundation
import Synchronization

/// The ingest listening socket and the thread that accepts on it, handing each connection to libmicrohttpd
/// (`MHD_add_connection`), which runs it on one of its epoll threads as if it had accepted it itself.
///
/// Why the relay owns the socket: a drain must stop accepting while the requests in flight finish, and
/// libmicrohttpd 0.9.75's way to do that, `MHD_quiesce_daemon`, races its own epoll threads — both remove the
/// listening socket from an epoll set, the loser gets ENOENT and libmicrohttpd aborts the process ("Failed to
/// remove listen FD from epoll set", seen in `swift test`; an open upstream defect). Here libmicrohttpd never sees the
/// listening socket (`MHD_USE_NO_LISTEN_SOCKET`): `stopAccepting` shuts it down, the kernel refuses new connections
/// at once, the blocked `accept` returns, and the thread ends before anything else happens to the daemon.
final class Listener: Sendable {
    /// Hands an accepted connection over; the receiver owns (and eventually closes) the descriptor.
    typealias Handoff = @Sendable (_ descriptor: Int32, _ peer: UnsafePointer<sockaddr>, _ length: socklen_t) -> Void

    let port: UInt16
    private let descriptor: Int32
    /// Set by `stopAccepting` before the shutdown, so the accept loop knows its error is the end, not a fault.
    private let stopping = Atomic<Bool>(false)
    /// Whether the descriptor is still open (closed once, by `stopAccepting`).
    private let open = Mutex(true)
    /// Signalled once when the accept thread has ended (or never started).
    private let ended = DispatchSemaphore(value: 0)
    private let started = Atomic<Bool>(false)

    /// Binds and listens on `address`:`port` (0 picks a free port) with SO_REUSEADDR, as libmicrohttpd did, so a
    /// restarted relay binds again at once.
    init(address: IPAddress, port: UInt16, backlog: Int32) throws(HTTPServer.StartError) {
        let family = address.isIPv4 ? AF_INET : AF_INET6
        let fd = socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw HTTPServer.StartError(description: "cannot open a socket: \(String(cString: strerror(errno)))") }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        let bound = SocketAddress.withSockaddr(address, port: port) { pointer in
            bind(fd, pointer, socklen_t(address.isIPv4 ? MemoryLayout<sockaddr_in>.size : MemoryLayout<sockaddr_in6>.size))
        }
        guard bound == 0, Glibc.listen(fd, backlog) == 0 else {
            let reason = String(cString: strerror(errno))
            close(fd)
            throw HTTPServer.StartError(description: "cannot listen on \(address):\(port): \(reason)")
        }
        descriptor = fd
        self.port = Self.boundPort(of: fd)
    }

    deinit { stopAccepting() }

    /// Starts the accept thread. Call once.
    func start(handing handoff: @escaping Handoff) {
        started.store(true, ordering: .sequentiallyConsistent)
        let thread = Thread { [self] in
            acceptLoop(handoff)
            ended.signal()
        }
        thread.name = "http-accept"
        thread.start()
    }

    /// Stops accepting: new connections are refused from now on and no handoff runs after this returns.
    /// Connections already handed over are not touched. Idempotent.
    func stopAccepting() {
        let wasOpen = open.withLock { open in
            defer { open = false }
            return open
        }
        guard wasOpen else { return }
        stopping.store(true, ordering: .sequentiallyConsistent)
        // On Linux, shutting down a listening socket stops it listening and wakes a thread blocked in accept (EINVAL).
        shutdown(descriptor, Int32(SHUT_RDWR))
        if started.load(ordering: .sequentiallyConsistent) { ended.wait() }
        close(descriptor)
    }

    private func acceptLoop(_ handoff: Handoff) {
        var peer = sockaddr_storage()
        while true {
            var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
            let client = withUnsafeMutablePointer(to: &peer) { storage in
                storage.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    accept(descriptor, $0, &length)
                }
            }
            if client >= 0 {
                // (accept4 would set both at once; Glibc's module does not export it.)
                _ = fcntl(client, F_SETFD, FD_CLOEXEC)
                _ = fcntl(client, F_SETFL, fcntl(client, F_GETFL) | O_NONBLOCK)
                withUnsafePointer(to: &peer) { storage in
                    storage.withMemoryRebound(to: sockaddr.self, capacity: 1) { handoff(client, $0, length) }
                }
                continue
            }
            let error = errno
            if stopping.load(ordering: .sequentiallyConsistent) { return }
            switch error {
            case EINTR, ECONNABORTED, EAGAIN, EPROTO, EPERM:
                continue  // this connection only (aborted before accept, refused by a firewall rule): take the next
            case EMFILE, ENFILE, ENOBUFS, ENOMEM:
                // Out of descriptors or memory: accepting again at once would spin. Connections wait in the backlog
                // while open ones close.
                usleep(50_000)
            default:
                return  // the socket itself is gone; nothing more can be accepted
            }
        }
    }

    private static func boundPort(of fd: Int32) -> UInt16 {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        _ = withUnsafeMutablePointer(to: &storage) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        let family = Int32(storage.ss_family)
        return withUnsafePointer(to: &storage) { pointer in
            family == AF_INET6
                ? pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin6_port) }
                : pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin_port) }
        }
    }
}
