internal import CLinux
import Foundation

/// Moves bytes between a non-blocking socket, a TLS session and an HTTP/2 session, on one event loop.
/// Subclasses (client and server connections) react to the handshake and to the end of the connection.
///
/// **Nothing here runs inside nghttp2.** nghttp2 forbids calling `nghttp2_session_mem_send`/`mem_recv` from its
/// own callbacks. So a callback (a stream closed, GOAWAY arrived) only *records* what it wants — `wantFlush()`,
/// `closeGracefully(reason:)`, or state the subclass reads in `runDeferredWork()` — and every event the loop hands
/// us (socket readiness, a timer, a task) ends with `settle()`, which does the recorded work once the library call
/// has returned. `HTTP2Session` traps if it is ever re-entered.
class HTTP2Transport {
    /// Where the connection is. Every transition is in this file; subclasses read it through `isOpen`/`isClosed`.
    enum State: Equatable {
        /// Waiting for a non-blocking connect to finish.
        case connecting
        /// TLS handshake under way.
        case handshaking
        /// TLS is up and the HTTP/2 session exchanges frames.
        case open
        /// A graceful close was asked for (possibly from inside a callback): the frames produced so far go out
        /// first, then close_notify — otherwise the close_notify would overtake a GOAWAY.
        case closing(reason: String)
        /// close_notify is queued behind the final frames; writing them out, then FIN.
        case draining(reason: String)
        /// Our close_notify and FIN are sent: reading (and dropping) what the peer still sends until it closes, so
        /// the kernel does not answer its last packets with a reset that could destroy our final frames in flight.
        case lingering(reason: String)
        case closed
    }

    let loop: EventLoop
    private(set) var fd: Int32
    let tls: TLSConnection
    var session: HTTP2Session?
    private(set) var state: State = .connecting
    /// The session has frames to produce (set by anything that submitted something, or by a callback).
    private var flushWanted = false
    /// `settle()` is running: a nested call (from a completion or event handler it triggered) leaves the work to it.
    private var settling = false
    /// A `settle()` is due at the end of this loop turn (`settleAtEndOfTurn`).
    private var settleScheduled = false
    private var outbound: [UInt8] = []
    private var outboundOffset = 0
    /// The frames nghttp2 produced in one `produceFrames`, before TLS encrypts them; emptied, not freed, after each:
    /// a fresh array grew by doubling, copying its frames each time, on every write (callgrind).
    private var frames: [UInt8] = []
    /// What `read` gives and, once fed to TLS (which copies it), what TLS decrypts: one buffer for the connection's
    /// life (allocated at its first read), not two zero-filled 64 KiB arrays allocated and freed on every read.
    private var receiveBuffer: UnsafeMutableRawBufferPointer?
    private var watchingWritable = false
    private static let readBufferSize = 64 * 1024
    /// How long a graceful close waits for the final frames to be written and for the peer to close.
    private static let lingerLimit: Duration = .seconds(2)

    init(loop: EventLoop, fd: Int32, tls: TLSConnection) {
        self.loop = loop
        self.fd = fd
        self.tls = tls
    }

    deinit {
        if fd >= 0 { close(fd) }
        receiveBuffer?.deallocate()
    }

    var isClosed: Bool { state == .closed }
    /// HTTP/2 frames flow (no close asked for yet).
    var isOpen: Bool { state == .open }

    /// Starts watching the socket. `connecting`: wait for a non-blocking connect to finish first.
    func attach(connecting: Bool) {
        loop.preconditionInLoop()
        watchingWritable = connecting
        loop.register(fd, events: EPOLLIN.rawValue | (connecting ? EPOLLOUT.rawValue : 0) | EPOLLRDHUP.rawValue) { [unowned self] events in
            socketReady(events)
        }
        if !connecting {
            state = .handshaking
            socketConnected()
            advanceHandshake()
        }
        settle()
    }

    // MARK: Hooks for subclasses

    /// The TCP connect finished; the TLS handshake begins.
    func socketConnected() {}

    /// TLS is up; create the HTTP/2 session here. Throwing closes the connection with that reason.
    func handshakeCompleted() throws {}

    /// Called by `settle()` outside nghttp2 before frames are produced: do what callbacks recorded (submit waiting
    /// requests, close once drained). Must not call `settle()`.
    func runDeferredWork() {}

    /// The connection is over (peer closed, error, or `close`). Called once.
    func transportClosed(reason: String) {}

    // MARK: Recording what is wanted (safe from inside callbacks)

    /// Frames were submitted: produce and send them at the next `settle()`.
    func wantFlush() { flushWanted = true }

    /// Sends what is queued (a GOAWAY, close_notify) and then closes — at the next `settle()`. Before TLS is up
    /// there is nothing to send and no nghttp2 session to be inside of: that closes at once.
    func closeGracefully(reason: String) {
        switch state {
        case .connecting, .handshaking: fail(reason)
        case .open: state = .closing(reason: reason)
        case .closing, .draining, .lingering, .closed: break
        }
    }

    // MARK: The loop's side

    private func socketReady(_ events: UInt32) {
        if state == .connecting {
            guard events & (EPOLLOUT.rawValue | EPOLLERR.rawValue | EPOLLHUP.rawValue) != 0 else { return }
            let error = Socket.pendingError(fd)
            guard error == 0 else { return fail("connect: \(String(cString: strerror(error)))") }
            state = .handshaking
            socketConnected()
            advanceHandshake()
        }
        if !isClosed, events & (EPOLLIN.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue | EPOLLRDHUP.rawValue) != 0 {
            readIn()
        }
        // EPOLLOUT needs nothing more: settle() writes whatever is waiting.
        settle()
    }

    /// `settle()` once this loop turn's tasks are done, however many ask: the requests (or answers) that a turn's
    /// tasks submit go out in one write, not one TLS record and one `write` each.
    func settleAtEndOfTurn() {
        loop.preconditionInLoop()
        guard !settleScheduled else { return }
        settleScheduled = true
        loop.atEndOfTurn { [weak self] in
            guard let self else { return }
            settleScheduled = false
            settle()
        }
    }

    /// Does what the last event asked for, until nothing is left: runs the subclass's deferred work, produces
    /// frames, writes them, and walks the close sequence. The only caller of `HTTP2Session.send`; every event
    /// entry point (socket, timer, loop task) ends here, never inside an nghttp2 callback.
    func settle() {
        loop.preconditionInLoop()
        guard !settling else { return }
        settling = true
        defer { settling = false }
        while !isClosed {
            if state == .open { runDeferredWork() }
            if case .closing(let reason) = state {
                produceFrames()
                guard !isClosed else { return }
                tls.shutdown()
                tls.drainCiphertext(into: &outbound)
                state = .draining(reason: reason)
                loop.schedule(after: Self.lingerLimit) { [weak self] in self?.fail(reason) }
                continue
            }
            if flushWanted, state == .open {
                produceFrames()
                continue
            }
            if let failure = writeOut() {
                // The peer is gone. Its last frames (responses!) may still be in our receive buffer: read them
                // before giving up on the streams they answer. `readIn` returns before we fail, so no call nests;
                // its own end-of-stream is a consequence of the failed write, which is the reason reported.
                outbound.removeAll()
                outboundOffset = 0
                readIn(closingAtEnd: false)
                return fail(failure)
            }
            if case .draining(let reason) = state, outbound.isEmpty {
                // Everything is written: half-close and linger instead of close(); see `State.lingering`.
                state = .lingering(reason: reason)
                Glibc.shutdown(fd, Int32(SHUT_WR))
            }
            // nghttp2 ended the session itself (a protocol error from the peer: it sent GOAWAY and now wants neither
            // to read nor to write): the connection is dead, whatever the socket says, and its streams must fail now.
            if state == .open, let session, !session.wantsIO {
                state = .closing(reason: "HTTP/2 session ended by a protocol error")
                continue
            }
            if !flushWanted || state != .open { return }
        }
    }

    /// Serialises every frame the session has ready into TLS records. Callbacks nghttp2 makes meanwhile (a stream
    /// closed after its last frame) only record work; the loop in `settle()` picks it up.
    private func produceFrames() {
        flushWanted = false
        guard let session else { return }
        do {
            frames.removeAll(keepingCapacity: true)
            try session.send(into: &frames)
            if !frames.isEmpty { try frames.withUnsafeBytes { try tls.write($0) } }
            tls.drainCiphertext(into: &outbound)
        } catch {
            fail("\(error)")
        }
    }

    /// Reads until the socket has nothing more. `closingAtEnd`: the peer's end of stream or a read error closes the
    /// connection (false: just stop reading; the caller closes it with its own reason).
    private func readIn(closingAtEnd: Bool = true) {
        let buffer = readBuffer
        while !isClosed {
            let count = read(fd, buffer.baseAddress, buffer.count)
            if count > 0 {
                switch state {
                case .draining, .lingering:
                    continue
                case .handshaking:
                    tls.feed(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
                    advanceHandshake()
                case .open, .closing:
                    tls.feed(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
                    decryptAndDeliver()
                case .connecting, .closed:
                    return
                }
            } else if count == 0 {
                guard closingAtEnd else { return }
                switch state {
                case .draining(let reason), .lingering(let reason): return fail(reason)
                default: return fail("connection closed by peer")
                }
            } else if errno == EAGAIN || errno == EWOULDBLOCK {
                return
            } else if errno != EINTR {
                guard closingAtEnd else { return }
                return fail("read: \(String(cString: strerror(errno)))")
            }
        }
    }

    private func advanceHandshake() {
        do {
            let progress = try tls.handshake()
            tls.drainCiphertext(into: &outbound)
            guard progress == .done, state == .handshaking else { return }
            state = .open
            try handshakeCompleted()
            wantFlush()
            // Application data that came in with the last handshake record.
            decryptAndDeliver()
        } catch {
            fail("\(error)")
        }
    }

    /// The connection's receive buffer (`receiveBuffer`). Its bytes are used only between a `read` and the `feed`
    /// that follows, and between a `tls.read` and the `receive` that follows, and none of those nest: nghttp2's
    /// callbacks only record work (see the type's comment), so nothing reads the socket while `receive` parses.
    private var readBuffer: UnsafeMutableRawBufferPointer {
        if let receiveBuffer { return receiveBuffer }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Self.readBufferSize, alignment: 16)
        receiveBuffer = buffer
        return buffer
    }

    /// Hands every decrypted byte to the session, one `receive` call at a time (each returns before the next).
    private func decryptAndDeliver() {
        let buffer = readBuffer
        while !isClosed {
            do {
                let result = try tls.read(into: buffer)
                switch result {
                case .bytes(let count):
                    try session?.receive(UnsafeRawBufferPointer(rebasing: buffer[0..<count]))
                case .wantMore:
                    // nghttp2 may have queued frames of its own (SETTINGS ACK, PING ACK, WINDOW_UPDATE).
                    wantFlush()
                    return
                case .closed:
                    return fail("TLS closed by peer")
                }
            } catch {
                return fail("\(error)")
            }
        }
    }

    /// Writes what is waiting; returns the reason if the socket failed.
    private func writeOut() -> String? {
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
                return nil
            } else if count < 0 && errno == EINTR {
                continue
            } else {
                return "write: \(String(cString: strerror(errno)))"
            }
        }
        outbound.removeAll(keepingCapacity: true)
        outboundOffset = 0
        if watchingWritable && state != .connecting {
            watchingWritable = false
            loop.modify(fd, events: EPOLLIN.rawValue | EPOLLRDHUP.rawValue)
        }
        return nil
    }

    /// Closes the connection with a TCP reset, as a crashed peer would (test servers).
    func abort(_ reason: String) {
        if fd >= 0 { Socket.resetOnClose(fd) }
        fail(reason)
    }

    /// Closes the connection now; `transportClosed` runs once. Never touches nghttp2, so it is safe anywhere.
    func fail(_ reason: String) {
        guard !isClosed else { return }
        state = .closed
        loop.unregister(fd)
        close(fd)
        fd = -1
        transportClosed(reason: reason)
    }
}
