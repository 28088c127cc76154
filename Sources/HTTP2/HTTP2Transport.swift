import Foundation
internal import CLinux

/// Moves bytes between a non-blocking socket, a TLS session and an HTTP/2 session, on one event loop.
/// Subclasses (client and server connections) react to the handshake and to the end of the connection.
class HTTP2Transport {
    let loop: EventLoop
    private(set) var fd: Int32
    let tls: TLSConnection
    var session: HTTP2Session?
    private var outbound: [UInt8] = []
    private var outboundOffset = 0
    private var watchingWritable = false
    private(set) var isClosed = false
    private var handshakeFinished = false
    private static let readBufferSize = 64 * 1024

    init(loop: EventLoop, fd: Int32, tls: TLSConnection) {
        self.loop = loop
        self.fd = fd
        self.tls = tls
    }

    deinit {
        if fd >= 0 { close(fd) }
    }

    /// Starts watching the socket. `connecting`: wait for a non-blocking connect to finish first.
    func attach(connecting: Bool) {
        loop.preconditionInLoop()
        loop.register(fd, events: EPOLLIN.rawValue | (connecting ? EPOLLOUT.rawValue : 0) | EPOLLRDHUP.rawValue) { [unowned self] events in
            socketReady(events)
        }
        watchingWritable = connecting
        if connecting { pendingConnect = true } else { advanceHandshake() }
    }

    private var pendingConnect = false
    /// After our close_notify and FIN: reading (and dropping) what the peer still sends until it closes, so the
    /// kernel does not answer its last packets with a reset that could destroy our final frames in flight.
    private var lingering = false

    // MARK: Hooks for subclasses

    /// TLS is up; create the HTTP/2 session here. Throwing closes the connection with that reason.
    func handshakeCompleted() throws {}

    /// The connection is over (peer closed, error, or `close`). Called once.
    func transportClosed(reason: String) {}

    // MARK: Pumping

    private func socketReady(_ events: UInt32) {
        if pendingConnect {
            guard events & (EPOLLOUT.rawValue | EPOLLERR.rawValue | EPOLLHUP.rawValue) != 0 else { return }
            pendingConnect = false
            let error = Socket.pendingError(fd)
            guard error == 0 else { return fail("connect: \(String(cString: strerror(error)))") }
            advanceHandshake()
            if isClosed { return }
        }
        if events & EPOLLOUT.rawValue != 0 { writeOut() }
        if isClosed { return }
        if events & (EPOLLIN.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue | EPOLLRDHUP.rawValue) != 0 { readIn() }
    }

    private func readIn() {
        var buffer = [UInt8](repeating: 0, count: Self.readBufferSize)
        while !isClosed {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count > 0 && lingering {
                continue
            } else if count > 0 {
                buffer.withUnsafeBytes { tls.feed(UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
                if !handshakeFinished {
                    advanceHandshake()
                    continue
                }
                decryptAndDeliver()
            } else if count == 0 {
                return fail(lingering ? lingerReason : "connection closed by peer")
            } else if errno == EAGAIN || errno == EWOULDBLOCK {
                return
            } else if errno != EINTR {
                return fail("read: \(String(cString: strerror(errno)))")
            }
        }
    }

    private func advanceHandshake() {
        do {
            let state = try tls.handshake()
            flushTLS()
            guard state == .done, !handshakeFinished else { return }
            handshakeFinished = true
            try handshakeCompleted()
            flush()
            decryptAndDeliver()
        } catch {
            fail("\(error)")
        }
    }

    private func decryptAndDeliver() {
        var buffer = [UInt8](repeating: 0, count: Self.readBufferSize)
        while !isClosed {
            do {
                let result = try buffer.withUnsafeMutableBytes { try tls.read(into: $0) }
                switch result {
                case .bytes(let count):
                    try buffer.withUnsafeBytes { try session?.receive(UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
                case .wantMore:
                    flush()
                    return
                case .closed:
                    return fail("TLS closed by peer")
                }
            } catch {
                flushing = false
                return fail("\(error)")
            }
        }
    }

    private var flushing = false
    private var flushRequested = false
    /// A close asked for while a flush was serialising frames; done once those frames are written.
    private var closeAfterFlush: String?
    /// A graceful close is under way (its own final flush must not start another).
    private var closing = false

    /// Sends whatever the HTTP/2 session has ready. nghttp2 calls back into us while it serialises frames (a stream
    /// closes, a waiting request gets submitted, which flushes again): such a nested call only asks the outer one
    /// to go round once more.
    func flush() {
        guard !isClosed, let session else { return }
        if flushing {
            flushRequested = true
            return
        }
        flushing = true
        repeat {
            flushRequested = false
            do {
                var frames: [UInt8] = []
                try session.send(into: &frames)
                if !frames.isEmpty { try frames.withUnsafeBytes { try tls.write($0) } }
                flushTLS()
            } catch {
                flushing = false
                return fail("\(error)")
            }
        } while flushRequested && !isClosed
        flushing = false
        // nghttp2 ended the session itself (a protocol error from the peer: it sent GOAWAY and now wants neither to
        // read nor to write): the connection is dead, whatever the socket says, and its streams must fail now.
        if !isClosed, !closing, closeAfterFlush == nil, !session.wantsIO {
            closeAfterFlush = "HTTP/2 session ended by a protocol error"
        }
        if let reason = closeAfterFlush {
            closeAfterFlush = nil
            closeGracefully(reason: reason)
        }
    }

    private func flushTLS() {
        tls.drainCiphertext(into: &outbound)
        writeOut()
    }

    private func writeOut() {
        while outboundOffset < outbound.count {
            // MSG_NOSIGNAL: a peer that closed must give EPIPE here, not kill the process with SIGPIPE.
            let count = outbound.withUnsafeBytes { send(fd, $0.baseAddress! + outboundOffset, outbound.count - outboundOffset, Int32(MSG_NOSIGNAL)) }
            if count > 0 {
                outboundOffset += count
            } else if count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) {
                if !watchingWritable {
                    watchingWritable = true
                    loop.modify(fd, events: EPOLLIN.rawValue | EPOLLOUT.rawValue | EPOLLRDHUP.rawValue)
                }
                return
            } else if count < 0 && errno == EINTR {
                continue
            } else {
                // The peer is gone. Its last frames (responses!) may still be in our receive buffer: read them
                // before giving up on the streams they answer.
                let reason = "write: \(String(cString: strerror(errno)))"
                outbound.removeAll()
                outboundOffset = 0
                readIn()
                return fail(reason)
            }
        }
        outbound.removeAll(keepingCapacity: true)
        outboundOffset = 0
        if watchingWritable && !pendingConnect {
            watchingWritable = false
            loop.modify(fd, events: EPOLLIN.rawValue | EPOLLRDHUP.rawValue)
        }
    }

    /// Closes the connection now; `transportClosed` runs once.
    func fail(_ reason: String) {
        guard !isClosed else { return }
        isClosed = true
        loop.unregister(fd)
        close(fd)
        fd = -1
        transportClosed(reason: reason)
    }

    /// Sends what is queued (a GOAWAY, close_notify) and then closes.
    func closeGracefully(reason: String) {
        guard !isClosed else { return }
        if flushing {
            // Called back from inside nghttp2 while frames are being produced: close after they are sent,
            // or the close_notify would overtake them (and a GOAWAY would never arrive).
            closeAfterFlush = closeAfterFlush ?? reason
            return
        }
        closing = true
        flush()
        guard !isClosed else { return }
        tls.shutdown()
        flushTLS()
        guard !isClosed, !lingering else { return }
        // Half-close and linger (bounded) instead of close(): see `lingering`.
        lingering = true
        lingerReason = reason
        Glibc.shutdown(fd, Int32(SHUT_WR))
        loop.schedule(after: .seconds(2)) { [weak self] in self?.fail(reason) }
    }

    private var lingerReason = ""
}
