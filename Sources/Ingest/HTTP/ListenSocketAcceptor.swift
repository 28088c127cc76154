internal import CMicroHTTPD
import Foundation
import Synchronization
import Threading

/// Accepts connections on a listening socket the relay was handed (systemd socket activation) and gives each to
/// libmicrohttpd with MHD_add_connection.
///
/// Why not MHD_OPTION_LISTEN_SOCKET: with it libmicrohttpd accepts, and the only way to make it stop accepting
/// without closing the socket is MHD_quiesce_daemon, which in 0.9.75 races its own epoll threads and aborts the
/// process (see `HTTPServer.drain`). Closing is not an option either: the socket is systemd's, and the next
/// process listens on it. Accepting here, stopping at SIGTERM is just this thread leaving: connections that
/// arrive after it wait in the kernel's backlog for the next process, none is accepted and dropped.
final class ListenSocketAcceptor: Sendable {
    let descriptor: Int32
    private let daemon: DaemonHandle
    private let connectionLimit: Int
    /// Told of each socket before libmicrohttpd gets it (see `UnheardConnections`).
    private let unheard: UnheardConnections
    /// Connections handed to libmicrohttpd that none of its threads has taken up yet (the server's notice of a
    /// started connection takes them off).
    private let handedOver: HandedOverConnections
    /// Written to by `stop()`; the accepting thread polls its read end next to the listening socket.
    private let stopPipe: (read: Int32, write: Int32)
    private let finished = DispatchSemaphore(value: 0)
    private let stopped = Mutex(false)
    /// How long the thread waits before accepting again at the connection limit or after EMFILE/ENFILE (then the
    /// connections wait in the backlog, as they do when libmicrohttpd itself stops accepting at its limit).
    static let retryMillis: Int32 = 20

    init(
        descriptor: Int32, daemon: DaemonHandle, connectionLimit: Int, unheard: UnheardConnections, handedOver: HandedOverConnections
    ) throws {
        var ends: [Int32] = [-1, -1]
        // pipe2 and accept4 are GNU extensions Swift's Glibc module does not export: the flags are set after.
        guard pipe(&ends) == 0 else {
            throw HTTPServer.StartError(description: "pipe: \(String(cString: strerror(errno)))")
        }
        for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        // Non-blocking, so an accept after poll never waits (another process may have taken the connection). The
        // flag is on the socket systemd shares with us; it never accepts on it itself (Accept=no).
        _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) | O_NONBLOCK)
        self.descriptor = descriptor
        self.daemon = daemon
        self.connectionLimit = connectionLimit
        self.unheard = unheard
        self.handedOver = handedOver
        stopPipe = (ends[0], ends[1])
        Thread.start(named: "http-accept") { [self] in run() }
    }

    /// Stops accepting and waits for the thread to leave. Idempotent. The listening socket stays open (the caller
    /// closes its copy once libmicrohttpd is stopped).
    func stop() {
        let first = stopped.withLock { stopped -> Bool in
            defer { stopped = true }
            return !stopped
        }
        guard first else { return }
        var byte: UInt8 = 1
        _ = write(stopPipe.write, &byte, 1)
        finished.wait()
        close(stopPipe.read)
        close(stopPipe.write)
    }

    private func run() {
        var descriptors = [pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0), pollfd(fd: stopPipe.read, events: Int16(POLLIN), revents: 0)]
        var holdOff = false
        while true {
            holdOff = holdOff || atLimit
            // A negative fd is skipped by poll: at the limit only the stop pipe and the retry deadline wake us.
            descriptors[0].fd = holdOff ? -1 : descriptor
            descriptors[0].revents = 0
            descriptors[1].revents = 0
            _ = poll(&descriptors, 2, holdOff ? Self.retryMillis : -1)
            if descriptors[1].revents != 0 { break }
            holdOff = false
            if descriptors[0].revents != 0 { holdOff = !acceptPending() }
        }
        finished.signal()
    }

    /// Whether the connections open and on their way to libmicrohttpd reach the limit. Its own count alone lags:
    /// a connection handed over counts only once one of its threads takes it up, so a burst accepted on that count
    /// went past the limit, and libmicrohttpd left what was over it unanswered (webhooks Uptime Kuma never resends).
    private var atLimit: Bool {
        Int(CMicroHTTPD_current_connections(daemon.pointer)) + handedOver.count >= connectionLimit
    }

    /// Accepts what is waiting, up to the limit (a bounded batch, so the stop pipe is looked at between batches).
    /// Returns false when accepting again at once would spin (at the limit, or out of descriptors).
    private func acceptPending() -> Bool {
        for _ in 0..<64 {
            if atLimit { return false }
            var storage = sockaddr_storage()
            var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
            let client = withUnsafeMutablePointer(to: &storage) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    accept(descriptor, $0, &length)
                }
            }
            guard client >= 0 else {
                // EAGAIN: nothing left. ECONNABORTED, EPROTO: that client is gone; the next poll says more. Anything
                // else (out of descriptors, a socket in trouble) would come back at once: wait a moment first.
                return [EAGAIN, EWOULDBLOCK, ECONNABORTED, EPROTO, EINTR].contains(errno)
            }
            // Close-on-exec like every descriptor of the relay; libmicrohttpd makes it non-blocking itself.
            _ = fcntl(client, F_SETFD, FD_CLOEXEC)
            // libmicrohttpd owns the socket from here, and closes it itself when it refuses it (accept policy,
            // connection limit).
            unheard.accepted(client)
            let added = withUnsafePointer(to: &storage) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    MHD_add_connection(daemon.pointer, client, $0, length)
                }
            }
            if added == .YES {
                handedOver.handed()
            } else {
                unheard.heard(client)
            }
        }
        return true
    }
}

/// Connections the acceptor handed to libmicrohttpd and none of its threads has taken up yet (its notice that a
/// connection started). The acceptor counts them against the limit beside libmicrohttpd's own count.
final class HandedOverConnections: Sendable {
    private let pending = Atomic<Int>(0)

    var count: Int { max(0, pending.load(ordering: .relaxed)) }

    func handed() { pending.add(1, ordering: .relaxed) }

    /// A thread of libmicrohttpd took one up: from now on its own count holds it.
    func takenUp() { pending.subtract(1, ordering: .relaxed) }
}
