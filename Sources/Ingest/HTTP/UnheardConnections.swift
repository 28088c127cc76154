import Synchronization

/// Connections accepted whose first request has not arrived yet, by socket. At SIGTERM under socket activation the
/// server stops accepting and then waits for these too, not only for requests in flight: a client that connected a
/// moment before is owed an answer, and its request line may still be on the wire (closing it then was a broken
/// pipe, or a 503 `shutting down`, for a webhook Uptime Kuma never retries).
///
/// Keyed by descriptor, entered by the acceptor before it hands the socket to libmicrohttpd (which takes it up on
/// its own thread later), so no connection is ever between the two unseen. libmicrohttpd reports a close before it
/// closes the descriptor, so a number is removed before it can be reused.
final class UnheardConnections: Sendable {
    private let descriptors = Mutex<Set<Int32>>([])

    var count: Int { descriptors.withLock { $0.count } }

    func accepted(_ descriptor: Int32) { _ = descriptors.withLock { $0.insert(descriptor) } }

    /// Its first request arrived (later ones on a kept-alive connection find it gone already), or it closed.
    func heard(_ descriptor: Int32) { _ = descriptors.withLock { $0.remove(descriptor) } }
}
