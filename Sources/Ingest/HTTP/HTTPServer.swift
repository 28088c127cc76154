internal import CMicroHTTPD
import Common
import Foundation
import Synchronization
import Threading

/// An HTTP/1.1 server on libmicrohttpd with its internal epoll threads.
///
/// The handler runs on an MHD thread once a request is fully received. It may answer at once or keep the
/// responder and answer later from another thread: the connection is then suspended (no MHD thread waits for it)
/// and resumed when the answer arrives. This is what lets a webhook wait for a group commit without pinning a
/// thread.
public final class HTTPServer: Sendable {
    public struct Configuration: Sendable {
        public var host: String
        /// 0 picks a free port; read the result from `port`.
        public var port: UInt16
        /// A listening socket to accept on instead of binding `host`:`port` (systemd socket activation). The server
        /// closes its copy at `stop()`; at `drain` it only stops accepting, so the socket's backlog is the next
        /// process's. Defaults to nil (bind).
        public var listeningSocket: Int32?
        /// MHD threads, each with its own epoll loop. Defaults to the number of cores.
        public var threads: Int = ProcessInfo.processInfo.activeProcessorCount
        /// Open connections at most. At the limit libmicrohttpd stops accepting: new connections wait in the listen
        /// backlog (1,024) until one closes. Defaults to 10,000.
        public var connectionLimit: Int = 10_000
        /// Seconds a connection may sit idle (or trickle a request) before it is closed. Defaults to 30.
        public var connectionTimeout: Int = 30
        /// Bytes of header buffer per connection; a longer URL gets 414 and larger headers 431 from libmicrohttpd
        /// (`requestsRefused`). Defaults to 32 KiB.
        public var connectionMemoryLimit: Int = 32 * 1024
        /// Largest accepted body; larger ones get `tooLargeResponse`. Defaults to 65,536 (SPEC §2).
        public var maxBodyBytes: Int = 65_536
        /// Time a request's line, headers and body may take to arrive in total (`ConnectionGuard`); nil: no limit
        /// beyond `connectionTimeout`'s inactivity. Defaults to nil.
        public var requestTimeout: Duration?
        /// Open connections per client (IPv4 address or IPv6 /64), refused at accept beyond it. Defaults to nil (none).
        public var connectionsPerClient: Int?
        /// Peers the per-client cap does not apply to (trusted proxies). Defaults to none.
        public var uncappedPeer: @Sendable (IPAddress) -> Bool = { _ in false }
        /// Hears each line of libmicrohttpd's error log, on its thread, after the server has counted it (for the
        /// owner's log). Defaults to nothing.
        public var onLibraryMessage: @Sendable (LibraryMessage) -> Void = { _ in }

        public init(host: String, port: UInt16) {
            self.host = host
            self.port = port
        }
    }

    public typealias Handler = @Sendable (HTTPRequest, any HTTPResponder) -> Void

    public struct StartError: Error, CustomStringConvertible {
        public let description: String
    }

    /// The answer to a body over `maxBodyBytes`, sent before the body is read.
    static let tooLargeResponse = HTTPResponse.error(413, "request body too large")

    let configuration: Configuration
    let handler: Handler
    /// The daemon handle. Written once in `init`, cleared once in `stop()`; guarded so `stop` is idempotent.
    private let daemon = Mutex<DaemonHandle?>(nil)
    /// Set by `drain`: from then on every new connection is closed as soon as libmicrohttpd accepts it.
    let draining = Atomic<Bool>(false)
    /// Requests received and not yet completed (for graceful shutdown).
    let inFlight = InFlightCounter()
    /// Requests libmicrohttpd answered with an error itself, by status.
    private let refusedByStatus = Mutex<[Int: Int]>([:])
    /// The context of libmicrohttpd's logger. Freed in deinit, once MHD_stop_daemon has returned (it logs nothing
    /// after that).
    private let messageSink = MessageSinkHandle()
    /// Requests handed to the handler and not yet completed (answered by `stop()` if need be).
    let dispatched = DispatchedRequests()
    /// Resumes of answered connections taken on and not yet made (`stop()` waits for them).
    let resumes = ResumesUnderway()
    /// Request deadlines and per-client caps; nil when neither is configured (no cost per request then).
    let connectionGuard: ConnectionGuard?
    /// What a request still unanswered at `stop()` gets, and one that arrives while stopping.
    static let shuttingDownResponse = HTTPResponse.error(503, "shutting down", headers: [("Retry-After", "5")])
    /// How long `stop()` lets the shutdown answers go out before closing every connection.
    static let answerFlushTimeout: Duration = .seconds(2)
    /// Beaten as each request arrives: a server that answers requests is alive without being asked.
    let requestHeartbeat = Heartbeat()
    /// Time since the last request arrived (the systemd watchdog probes the listener after a quiet spell).
    public var silence: Duration { requestHeartbeat.age }
    /// The address the server listens on (the handed-over socket's, or `host`); the port is `port`.
    public var listenAddress: IPAddress? {
        configuration.listeningSocket.flatMap { SocketAddress.local(of: $0)?.address } ?? IPAddress(configuration.host)
    }
    /// The port actually bound (set once the daemon is running).
    public var port: UInt16 { boundPort.withLock { $0 } }
    private let boundPort = Mutex<UInt16>(0)
    /// Under socket activation, connections accepted and not heard from yet (`drain` waits for them); else nil.
    let unheard: UnheardConnections?
    /// Under socket activation, connections the acceptor handed over that libmicrohttpd has not taken up yet; else nil.
    let handedOver: HandedOverConnections?
    /// Accepts on `configuration.listeningSocket`; nil when libmicrohttpd bound its own. Stopped before the daemon.
    private let acceptor = Mutex<ListenSocketAcceptor?>(nil)

    public init(_ configuration: Configuration, handler: @escaping Handler) throws {
        self.configuration = configuration
        self.handler = handler
        unheard = configuration.listeningSocket == nil ? nil : UnheardConnections()
        handedOver = configuration.listeningSocket == nil ? nil : HandedOverConnections()
        connectionGuard =
            configuration.requestTimeout == nil && configuration.connectionsPerClient == nil
            ? nil
            : ConnectionGuard(
                .init(
                    requestTimeout: configuration.requestTimeout,
                    idleTimeout: .seconds(configuration.connectionTimeout),
                    perClient: configuration.connectionsPerClient, exempt: configuration.uncappedPeer))
        guard let address = IPAddress(configuration.host) else {
            throw StartError(description: "\(configuration.host) is not an IP address")
        }
        var flags =
            UInt32(MHD_USE_EPOLL_INTERNAL_THREAD.rawValue) | UInt32(MHD_ALLOW_SUSPEND_RESUME.rawValue)
            | UInt32(MHD_USE_TURBO.rawValue) | UInt32(MHD_USE_ERROR_LOG.rawValue)
        // `::` listens on IPv4 too (IPV6_V6ONLY off), as operators expect of a wildcard: a proxy on 127.0.0.1 must
        // reach a relay configured with HOST=::. IPv4 peers then arrive mapped (::ffff:a.b.c.d) and are folded back
        // to IPv4 (SocketAddress). A specific IPv6 address stays IPv6 only.
        if !address.isIPv4 {
            let wildcard = address.bytes.allSatisfy { $0 == 0 }
            flags |= wildcard ? UInt32(MHD_USE_DUAL_STACK.rawValue) : UInt32(MHD_USE_IPv6.rawValue)
        }
        let listening = configuration.listeningSocket
        if listening != nil { flags |= UInt32(MHD_USE_NO_LISTEN_SOCKET.rawValue) | UInt32(MHD_USE_ITC.rawValue) }
        // `self` is handed to C unretained: the daemon is stopped in `stop()`/`deinit` before `self` goes away, and
        // MHD calls none of these callbacks after MHD_stop_daemon returns.
        let selfPointer = Unmanaged.passUnretained(self).toOpaque()
        messageSink.pointer.pointee.cls = selfPointer
        let started: OpaquePointer? = SocketAddress.withSockaddr(address, port: configuration.port) { sockaddrPointer in
            var config = CMicroHTTPD_Config(
                flags: flags, address: listening == nil ? sockaddrPointer : nil,
                thread_pool_size: UInt32(max(1, configuration.threads)),
                // Under socket activation the acceptor keeps to the limit; libmicrohttpd's own, which it splits
                // between its threads and checks against a count that lags what was handed over, is set out of reach
                // so that it never closes a connection the acceptor admitted.
                connection_limit: UInt32(configuration.connectionLimit * (listening == nil ? 1 : max(1, configuration.threads) + 1)),
                connection_timeout: UInt32(configuration.connectionTimeout),
                connection_memory_limit: configuration.connectionMemoryLimit)
            return CMicroHTTPD_start(
                &config, accessHandler, selfPointer, requestCompleted, selfPointer, uriLogged, selfPointer,
                acceptPolicy, selfPointer,
                connectionGuard == nil && unheard == nil ? nil : connectionNotified, selfPointer, messageSink.pointer)
        }
        guard let started else {
            throw StartError(description: "cannot listen on \(configuration.host):\(configuration.port) (in use, or no permission)")
        }
        let handle = DaemonHandle(pointer: started)
        daemon.withLock { $0 = handle }
        guard let listening else {
            let bound = CMicroHTTPD_bound_port(started)
            boundPort.withLock { $0 = bound }
            return
        }
        boundPort.withLock { $0 = SocketAddress.local(of: listening)?.port ?? 0 }
        do {
            let accepting = try ListenSocketAcceptor(
                descriptor: listening, daemon: handle, connectionLimit: configuration.connectionLimit,
                unheard: unheard ?? UnheardConnections(), handedOver: handedOver ?? HandedOverConnections())
            acceptor.withLock { $0 = accepting }
        } catch {
            MHD_stop_daemon(started)
            daemon.withLock { $0 = nil }
            throw error
        }
    }

    // Last reference gone: nothing can call back into a server being freed, so stop and wait (never in the
    // background, which would need `self` alive past its deinit).
    deinit {
        stop(fromDeinit: true)
        messageSink.free()
    }

    /// Connections shut down because a request did not arrive within `requestTimeout`.
    public var connectionsCut: Int { connectionGuard?.cut.load(ordering: .relaxed) ?? 0 }
    /// Connections refused because their client already had `connectionsPerClient` open.
    public var connectionsRefused: Int { connectionGuard?.refused.load(ordering: .relaxed) ?? 0 }

    /// Requests libmicrohttpd refused itself before any handler saw them (414 URL or 431 headers over
    /// `connectionMemoryLimit`, 400 malformed, …), by status.
    public var requestsRefused: [Int: Int] { refusedByStatus.withLock { $0 } }

    /// Counts a line of libmicrohttpd's log, then hands it to the owner.
    func libraryLogged(_ message: LibraryMessage) {
        if case .refusedRequest(let status) = message { refusedByStatus.withLock { $0[status, default: 0] += 1 } }
        configuration.onLibraryMessage(message)
    }

    /// Open connections right now.
    public var openConnections: Int {
        daemon.withLock { $0.map { Int(CMicroHTTPD_current_connections($0.pointer)) } ?? 0 }
    }

    /// Stops accepting new connections; requests already received are still answered. Then waits (at most
    /// `grace`) for requests in flight to complete. Returns whether all completed.
    @discardableResult
    public func drain(grace: Duration) -> Bool {
        // New connections are closed at once from now on (the accept policy says no), so a load balancer moves on;
        // connections already open keep being served. Not MHD_quiesce_daemon: in libmicrohttpd 0.9.75 it races
        // its own epoll threads over the listening socket, and the loser aborts the process ("Failed to remove
        // listen FD from epoll set", an open upstream defect; `drainingWhileRequestsArriveNeverAbortsTheProcess`
        // reached it about once in five runs). The listening socket stays libmicrohttpd's and closes at stop.
        // A handed-over socket: stop accepting altogether first, so what arrives from now on waits in its backlog,
        // and answer every connection already accepted that sends its request within the grace period. First:
        // with the accept policy saying no before the acceptor had stopped, a connection it accepted in between was
        // handed to libmicrohttpd, refused and reset — a webhook lost in a restart (test_socket_activation, under
        // load, once in three full runs).
        acceptor.withLock { $0 }?.stop()
        draining.store(true, ordering: .relaxed)
        let unheard = self.unheard
        return inFlight.waitUntilZero(timeout: grace) { (unheard?.count ?? 0) == 0 }
    }

    /// Answers every request still waiting for its handler (503 `shutting down`; the handler's later answer is
    /// dropped), lets those answers go out, then closes every connection and stops the threads. Idempotent.
    ///
    /// libmicrohttpd 0.9.x aborts the process in MHD_stop_daemon while a connection is suspended, and a request
    /// waiting for its answer is a suspended connection (a Test webhook waiting for APNs, a device call waiting on
    /// a locked database); answering resumes it.
    public func stop() { stop(fromDeinit: false) }

    private func stop(fromDeinit: Bool) {
        // Taken out, so a second stop neither stops it again nor closes the descriptor twice (a number that may
        // name another file by then).
        let accepting = acceptor.withLock { acceptor -> ListenSocketAcceptor? in
            defer { acceptor = nil }
            return acceptor
        }
        accepting?.stop()
        defer { if let accepting { close(accepting.descriptor) } }
        let unanswered = dispatched.close()
        for context in unanswered { ConnectionResponder(context: context, resumes: resumes).respond(Self.shuttingDownResponse) }
        if !unanswered.isEmpty { _ = dispatched.waitUntilEmpty(timeout: Self.answerFlushTimeout) }
        // A resume taken on before the answers above and not yet made: stopping now would find its connection
        // still suspended (see `ResumesUnderway`). It is a call into libmicrohttpd already under way.
        resumes.waitForNone()
        let handle = daemon.withLock { daemon -> DaemonHandle? in
            let handle = daemon
            daemon = nil
            return handle
        }
        guard let handle else { return }
        if fromDeinit { return MHD_stop_daemon(handle.pointer) }
        // MHD_stop_daemon wakes its epoll thread and joins it. Seen once in many runs (right after a quiesce and a
        // resumed suspended connection): the thread missed the wake-up and the join never returned, so SIGTERM hung.
        // The stop runs on a thread of its own that keeps this server alive (MHD calls back with an unretained
        // pointer to it until MHD_stop_daemon returns); past `stopTimeout` the caller goes on — the process is
        // exiting — instead of hanging with it.
        let stopped = DispatchSemaphore(value: 0)
        Thread.start(named: "http-stop") { [self] in
            MHD_stop_daemon(handle.pointer)
            _ = withExtendedLifetime(self) { stopped.signal() }
        }
        _ = stopped.wait(timeout: .now() + Self.stopTimeout.seconds)
    }

    static let stopTimeout: Duration = .seconds(10)

    /// The libmicrohttpd version, e.g. `0.9.75`.
    public static var libraryVersion: String { String(cString: MHD_get_version()) }
}

/// A running daemon. @unchecked Sendable: libmicrohttpd's daemon-level calls used here (info, stop) are
/// documented as callable from any thread, and `HTTPServer` clears the handle under its mutex before stopping it.
struct DaemonHandle: @unchecked Sendable {
    let pointer: OpaquePointer
}

/// The logger context handed to libmicrohttpd. @unchecked Sendable: written only in `HTTPServer.init`, before the
/// daemon starts; then read only by libmicrohttpd's threads; freed in `HTTPServer`'s deinit, after MHD_stop_daemon.
struct MessageSinkHandle: @unchecked Sendable {
    let pointer: UnsafeMutablePointer<CMicroHTTPD_MessageSink>

    init() {
        pointer = .allocate(capacity: 1)
        pointer.initialize(to: CMicroHTTPD_MessageSink(callback: libraryMessageLogged, cls: nil))
    }

    func free() {
        pointer.deinitialize(count: 1)
        pointer.deallocate()
    }
}

/// Counts requests in flight and lets shutdown (one waiter) wait for zero.
final class InFlightCounter: Sendable {
    private let count = Mutex(0)
    private let decremented = WakeUp()

    func increment() { count.withLock { $0 += 1 } }

    func decrement() {
        count.withLock { $0 -= 1 }
        decremented.signal()
    }

    /// Something else the waiter waits for changed (see `waitUntilZero`'s `and`).
    func poke() { decremented.signal() }

    /// Waits until no request is in flight and `and` holds (re-checked at each decrement and `poke`).
    func waitUntilZero(timeout: Duration, and condition: () -> Bool = { true }) -> Bool {
        let deadline = ContinuousClock.now + timeout
        while count.withLock({ $0 }) > 0 || !condition() {
            if !decremented.wait(until: deadline) { return count.withLock { $0 } == 0 && condition() }
        }
        return true
    }
}
