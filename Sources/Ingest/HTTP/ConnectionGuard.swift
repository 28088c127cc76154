import Common
import Foundation
import Synchronization
import Threading

/// Limits on connections that libmicrohttpd 0.9.x does not have (issue 13):
///
/// - **A total deadline for receiving each request.** MHD's connection timeout counts inactivity, so a client that
///   trickles a byte every few seconds keeps its connection forever. Here a request's line, headers and body must
///   all arrive within `requestTimeout` of its start (a new connection's start, or for the next request on a
///   kept-alive connection, `idleTimeout` after the previous answer). Past it a timer shuts the socket down; MHD's
///   thread then sees the end of the stream and closes the connection the usual way. A request being answered
///   (dispatched, maybe suspended) has no deadline: the relay decides how long that takes.
/// - **Connections per client.** At most `perClient` open connections per client key (an IPv4 address or an
///   IPv6 /64), refused at accept. The check and the count are separate steps (MHD calls them separately), so a
///   client may briefly exceed the cap by at most one connection per MHD thread.
///
/// The socket is shut down under the same lock that MHD's close notification takes, and MHD notifies before it
/// closes the descriptor, so a descriptor number is never shut down after MHD has closed (and maybe reused) it.
final class ConnectionGuard: Sendable {
    struct Limits: Sendable {
        var requestTimeout: Duration?
        var idleTimeout: Duration
        var perClient: Int?
        /// Peers that are never capped: trusted reverse proxies, whose one address stands for many clients.
        var exempt: @Sendable (IPAddress) -> Bool
    }

    private struct Tracked {
        let descriptor: Int32
        /// The per-client key, or nil when the peer is exempt or unknown.
        let client: String?
        var deadline: ContinuousClock.Instant?
    }

    private struct State {
        /// By the address of MHD's connection object (stable for the connection's life).
        var connections: [UInt: Tracked] = [:]
        var perClient: [String: Int] = [:]
    }

    let limits: Limits
    private let state = Mutex(State())
    /// Connections shut down because a request did not arrive in time.
    let cut = Atomic<Int>(0)
    /// Connections refused because their client had `perClient` open.
    let refused = Atomic<Int>(0)

    init(_ limits: Limits) {
        self.limits = limits
        guard let timeout = limits.requestTimeout else { return }
        // Deadlines are checked a few times per timeout, at most every second: a request is cut at most a quarter
        // of the timeout (or a second) late. The thread ends within a period once the guard is gone.
        let period = min(timeout / 4, .seconds(1)).seconds
        Thread.start(named: "http-deadlines") { [weak self] in
            while true {
                Thread.sleep(forTimeInterval: period)
                guard let self else { return }
                self.cutLateRequests()
            }
        }
    }

    /// Whether a new connection from `address` may be accepted.
    func mayAccept(_ address: IPAddress?) -> Bool {
        guard let cap = limits.perClient, let address, !limits.exempt(address) else { return true }
        let key = Client.limitKey(address)
        let allowed = state.withLock { $0.perClient[key, default: 0] < cap }
        if !allowed { refused.add(1, ordering: .relaxed) }
        return allowed
    }

    func opened(_ connection: OpaquePointer, descriptor: Int32, address: IPAddress?) {
        var client: String?
        if limits.perClient != nil, let address, !limits.exempt(address) { client = Client.limitKey(address) }
        let deadline = limits.requestTimeout.map { ContinuousClock.now + $0 }
        state.withLock { state in
            state.connections[Self.key(connection)] = Tracked(descriptor: descriptor, client: client, deadline: deadline)
            if let client { state.perClient[client, default: 0] += 1 }
        }
    }

    /// A request line arrived: the request must be whole within the timeout from now (or sooner, if the time
    /// allowed since the connection opened or went idle ends first).
    func requestStarted(_ connection: OpaquePointer) {
        guard let timeout = limits.requestTimeout else { return }
        let latest = ContinuousClock.now + timeout
        state.withLock { state in
            guard let current = state.connections[Self.key(connection)]?.deadline else { return }
            state.connections[Self.key(connection)]?.deadline = min(current, latest)
        }
    }

    /// The request is whole and handed to the handler: no deadline while the relay works on it.
    func requestReceived(_ connection: OpaquePointer) {
        guard limits.requestTimeout != nil else { return }
        state.withLock { $0.connections[Self.key(connection)]?.deadline = nil }
    }

    /// The answer went out: the next request on this connection must be whole within the idle time plus the timeout.
    func requestCompleted(_ connection: OpaquePointer) {
        guard let timeout = limits.requestTimeout else { return }
        let deadline = ContinuousClock.now + limits.idleTimeout + timeout
        state.withLock { $0.connections[Self.key(connection)]?.deadline = deadline }
    }

    func closed(_ connection: OpaquePointer) {
        state.withLock { state in
            guard let tracked = state.connections.removeValue(forKey: Self.key(connection)) else { return }
            if let client = tracked.client {
                let remaining = state.perClient[client, default: 1] - 1
                state.perClient[client] = remaining > 0 ? remaining : nil
            }
        }
    }

    /// Connections tracked right now (for tests).
    var tracked: Int { state.withLock { $0.connections.count } }

    private func cutLateRequests() {
        let now = ContinuousClock.now
        let count = state.withLock { state -> Int in
            var count = 0
            for (key, tracked) in state.connections {
                guard let deadline = tracked.deadline, deadline < now else { continue }
                state.connections[key]?.deadline = nil
                // Under the lock: MHD's close notification (which takes it) comes before MHD closes the descriptor.
                shutdown(tracked.descriptor, Int32(SHUT_RDWR))
                count += 1
            }
            return count
        }
        if count > 0 { cut.add(count, ordering: .relaxed) }
    }

    private static func key(_ connection: OpaquePointer) -> UInt { UInt(bitPattern: Int(bitPattern: connection)) }
}
