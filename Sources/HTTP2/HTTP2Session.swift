internal import CNGHTTP2
import Foundation

/// What an HTTP/2 session reports while it parses the peer's bytes. Called synchronously from inside
/// `HTTP2Session.receive`, on the session's event loop.
protocol HTTP2SessionDelegate: AnyObject {
    /// Server side: a peer opened a stream (request headers follow).
    func streamOpened(_ stream: Int32)
    /// A header of a request (server side) or response (client side), as nghttp2 decoded it: the bytes are valid
    /// only during the call, so each side turns into Strings only what it keeps.
    func headerReceived(_ stream: Int32, name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer)
    func dataReceived(_ stream: Int32, _ bytes: UnsafeRawBufferPointer) -> Bool
    /// The peer finished sending on `stream` (END_STREAM on HEADERS or DATA).
    func streamEnded(_ stream: Int32)
    /// The stream is gone; `errorCode` is 0 for a normal close, 7 for REFUSED_STREAM, etc.
    func streamClosed(_ stream: Int32, errorCode: UInt32)
    func goAwayReceived(lastStreamID: Int32, errorCode: UInt32, debugData: [UInt8])
    func settingsReceived()
    func pingAcknowledged()
}

/// A header to send. `sensitive` headers are never put in the HPACK dynamic table (`NGHTTP2_NV_FLAG_NO_INDEX`):
/// APNs asks for that on `:path`, and it keeps device tokens and JWTs out of shared compression state.
struct HTTP2Header {
    var name: String
    var value: String
    var sensitive = false
}

/// One nghttp2 session (client or server) that exchanges bytes in memory: the caller feeds what the peer sent with
/// `receive` and writes out what `send` produces. Owned by one event loop; not thread-safe.
final class HTTP2Session {
    private var handle: OpaquePointer!
    // Set once in init, before any callback can run. The delegate (the transport) holds this session for its whole
    // life and nghttp2 calls back only inside `receive` and `send` (`nghttp2_session_mem_recv`/`mem_send`; deleting
    // the session calls nothing back), which only the delegate calls, from its own methods: it is alive during every
    // callback. So release builds read it unowned(unsafe), with no reference count (a checked `unowned` read is an
    // atomic increment and decrement through the side table its weak references give the delegate); debug builds,
    // where every test runs, keep the check.
    #if DEBUG
        fileprivate unowned let delegate: any HTTP2SessionDelegate
    #else
        fileprivate unowned(unsafe) let delegate: any HTTP2SessionDelegate
    #endif
    /// What is being sent, by stream: the body and how much of it went, and a request's headers, which nghttp2
    /// reads where they lie (`submitRequest`) until their HEADERS frame is encoded.
    private var outgoing: [Int32: Outgoing] = [:]

    private struct Outgoing {
        /// The blocks a request's name/value pairs point into, held, unchanged, until the stream closes or its body
        /// has gone (after its HEADERS, so they were encoded): an array's elements live in its heap buffer, which
        /// neither moves nor is freed while this copy refers to it and nothing mutates it.
        let headers: (pseudo: HTTP2HeaderBlock, head: HTTP2HeaderBlock)?
        let body: [UInt8]
        var offset = 0

        /// Copies up to `length` more bytes of the body to `buffer`; returns how many, and whether the body has gone.
        mutating func copyBody(into buffer: UnsafeMutablePointer<UInt8>, length: Int) -> (count: Int, done: Bool) {
            let count = min(length, body.count - offset)
            body.withUnsafeBufferPointer { source in buffer.update(from: source.baseAddress! + offset, count: count) }
            offset += count
            return (count, offset >= body.count)
        }
    }
    /// A request with `Indexing.uniqueValue` headers was submitted with them indexed, so that their names enter
    /// both tables when its HEADERS are encoded (in submission order, before any later request's); these headers
    /// are never indexed again on this session. Set at the submission, not the encoding: should that HEADERS never
    /// go out (the transport failed first), later requests spell the names, which costs bytes, not correctness.
    private var uniqueValueNamesIndexed = false
    /// Inside `nghttp2_session_mem_recv`/`mem_send`, whose callbacks must not call either again (nghttp2's rule;
    /// breaking it corrupts the session's memory). The transport is built so they never do; this proves it.
    private var inLibraryCall = false

    enum Role { case client, server }

    struct Failure: Error, CustomStringConvertible {
        let code: Int32
        let context: String
        var description: String { "\(context): \(String(cString: nghttp2_strerror(code)))" }
        /// A client has used every stream id a connection allows (2^30 requests): only a new connection can send.
        var streamIDsUsedUp: Bool { code == NGHTTP2_ERR_STREAM_ID_NOT_AVAILABLE.rawValue }
    }

    init(role: Role, delegate: any HTTP2SessionDelegate, maxConcurrentStreams: UInt32 = 1000) throws {
        self.delegate = delegate
        var callbacks: OpaquePointer?
        guard nghttp2_session_callbacks_new(&callbacks) == 0, let callbacks else {
            throw Failure(code: NGHTTP2_ERR_NOMEM.rawValue, context: "callbacks")
        }
        defer { nghttp2_session_callbacks_del(callbacks) }
        nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, onBeginHeaders)
        nghttp2_session_callbacks_set_on_header_callback(callbacks, onHeader)
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, onDataChunk)
        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, onFrame)
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, onStreamClose)

        var options: OpaquePointer?
        nghttp2_option_new(&options)
        defer { nghttp2_option_del(options) }
        // Until the server's SETTINGS arrive, assume it allows one stream (APNs starts token connections at 1),
        // not nghttp2's default of 100.
        nghttp2_option_set_peer_max_concurrent_streams(options, 1)

        var session: OpaquePointer?
        // The session holds `self` unretained: `self` owns the session and deletes it in deinit, and callbacks run
        // only inside this object's own calls into nghttp2.
        let userData = Unmanaged.passUnretained(self).toOpaque()
        let result =
            role == .client
            ? nghttp2_session_client_new2(&session, callbacks, userData, options)
            : nghttp2_session_server_new2(&session, callbacks, userData, options)
        guard result == 0, let session else { throw Failure(code: result, context: "session") }
        handle = session

        var settings = [
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS.rawValue), value: maxConcurrentStreams),
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE.rawValue), value: 1 << 20),
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_ENABLE_PUSH.rawValue), value: 0)
        ]
        if role == .server { settings.removeLast() }
        let submitted = nghttp2_submit_settings(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), settings, settings.count)
        guard submitted == 0 else { throw Failure(code: submitted, context: "settings") }
        if role == .client {
            // A large connection window so many concurrent responses never stall on flow control.
            nghttp2_session_set_local_window_size(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), 0, 16 << 20)
        }
    }

    deinit { nghttp2_session_del(handle) }

    /// Parses the peer's bytes, calling the delegate.
    func receive(_ bytes: UnsafeRawBufferPointer) throws {
        guard bytes.count > 0 else { return }
        enterLibrary("receive")
        defer { inLibraryCall = false }
        let consumed = nghttp2_session_mem_recv(handle, bytes.baseAddress?.assumingMemoryBound(to: UInt8.self), bytes.count)
        guard consumed >= 0 else { throw Failure(code: Int32(consumed), context: "protocol error from peer") }
    }

    /// Appends every frame ready to go to `output`.
    func send(into output: inout [UInt8]) throws {
        enterLibrary("send")
        defer { inLibraryCall = false }
        while true {
            var data: UnsafePointer<UInt8>?
            let count = nghttp2_session_mem_send(handle, &data)
            guard count >= 0 else { throw Failure(code: Int32(count), context: "send") }
            guard count > 0, let data else { return }
            output.append(contentsOf: UnsafeBufferPointer(start: data, count: count))
        }
    }

    /// Opens a stream with the pseudo-headers before `:path`, then the request's head (`:path` and its headers) and
    /// body; returns its id. nghttp2 takes the blocks as they are laid out and reads them where they lie when it
    /// encodes the HEADERS frame (`NGHTTP2_NV_FLAG_NO_COPY_NAME` and `_VALUE`), so they are held until then
    /// (`Outgoing`): copying every name and value at submission, and lower-casing the names again, was about 1,900
    /// instructions a request (callgrind, thirty-first session).
    func submitRequest(pseudoHeaders: HTTP2HeaderBlock, request: HTTP2Request) throws -> Int32 {
        let id = withNameValues(pseudoHeaders, request.head) { nva in
            request.body.isEmpty
                ? nghttp2_submit_request(handle, nil, nva.baseAddress, nva.count, nil, nil)
                : withDataProvider { provider in nghttp2_submit_request(handle, nil, nva.baseAddress, nva.count, provider, nil) }
        }
        guard id > 0 else { throw Failure(code: id, context: "submit request") }
        outgoing[id] = Outgoing(headers: (pseudoHeaders, request.head), body: request.body)
        if !uniqueValueNamesIndexed, request.head.hasUniqueValues { uniqueValueNamesIndexed = true }
        return id
    }

    /// Answers `stream` (server side).
    func submitResponse(_ stream: Int32, headers: [HTTP2Header], body: [UInt8]) throws {
        if !body.isEmpty { outgoing[stream] = Outgoing(headers: nil, body: body) }
        let result = withNameValues(headers) { nva in
            body.isEmpty
                ? nghttp2_submit_response(handle, stream, nva.baseAddress, nva.count, nil)
                : withDataProvider { provider in nghttp2_submit_response(handle, stream, nva.baseAddress, nva.count, provider) }
        }
        guard result == 0 else {
            outgoing[stream] = nil
            throw Failure(code: result, context: "submit response")
        }
    }

    func submitSettings(maxConcurrentStreams: UInt32) {
        let entry = [nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS.rawValue), value: maxConcurrentStreams)]
        nghttp2_submit_settings(handle, UInt8(NGHTTP2_FLAG_NONE.rawValue), entry, 1)
    }

    func submitGoAway(errorCode: UInt32 = 0, debugData: [UInt8] = [], lastStreamID: Int32? = nil) {
        let last = lastStreamID.map { max(0, $0) } ?? nghttp2_session_get_last_proc_stream_id(handle)
        nghttp2_submit_goaway(handle, UInt8(NGHTTP2_FLAG_NONE.rawValue), last, errorCode, debugData, debugData.count)
    }

    func submitPing() {
        nghttp2_submit_ping(handle, UInt8(NGHTTP2_FLAG_NONE.rawValue), nil)
    }

    /// Tests: the stream id the next request takes (odd for a client), to reach the end of the id space without
    /// sending a billion requests first.
    func setNextStreamID(_ id: Int32) {
        nghttp2_session_set_next_stream_id(handle, id)
    }

    func resetStream(_ stream: Int32, errorCode: UInt32) {
        nghttp2_submit_rst_stream(handle, UInt8(NGHTTP2_FLAG_NONE.rawValue), stream, errorCode)
    }

    /// The peer's current SETTINGS_MAX_CONCURRENT_STREAMS (what we may have open at once).
    var peerMaxConcurrentStreams: Int {
        Int(nghttp2_session_get_remote_settings(handle, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS))
    }

    /// Bytes our HPACK encoder's dynamic table holds (tests: what the headers we sent left in it).
    var encoderTableSize: Int { nghttp2_session_get_hd_deflate_dynamic_table_size(handle) }

    var wantsIO: Bool { nghttp2_session_want_read(handle) != 0 || nghttp2_session_want_write(handle) != 0 }

    static let refusedStream = NGHTTP2_REFUSED_STREAM.rawValue
    static let cancel = NGHTTP2_CANCEL.rawValue

    // MARK: Helpers

    private func enterLibrary(_ call: StaticString) {
        precondition(!inLibraryCall, "HTTP2Session.\(call) called from inside an nghttp2 callback")
        inLibraryCall = true
    }

    private func withNameValues<T>(_ headers: [HTTP2Header], _ body: (UnsafeBufferPointer<nghttp2_nv>) throws -> T) rethrows -> T {
        // nghttp2 copies names and values during submit (no NO_COPY flags), so they only need to live for the call:
        // one temporary buffer holds them all, and the name/value array another (on the stack when small), instead
        // of four heap allocations per header on every push.
        let length = headers.reduce(0) { $0 + $1.name.utf8.count + $1.value.utf8.count }
        return try withUnsafeTemporaryAllocation(of: UInt8.self, capacity: max(1, length)) { bytes in
            try withUnsafeTemporaryAllocation(of: nghttp2_nv.self, capacity: headers.count) { nva in
                var offset = 0
                func place(_ text: String) -> (UnsafeMutablePointer<UInt8>, Int) {
                    let start = bytes.baseAddress! + offset
                    let count = UnsafeMutableBufferPointer(rebasing: bytes[offset...]).initialize(fromContentsOf: text.utf8)
                    offset += count
                    return (start, count)
                }
                for (index, header) in headers.enumerated() {
                    let (name, nameLength) = place(header.name)
                    let (value, valueLength) = place(header.value)
                    nva.initializeElement(
                        at: index,
                        to: nghttp2_nv(
                            name: name, value: value, namelen: nameLength, valuelen: valueLength,
                            flags: UInt8(header.sensitive ? NGHTTP2_NV_FLAG_NO_INDEX.rawValue : NGHTTP2_NV_FLAG_NONE.rawValue)))
                }
                defer { _ = nva.prefix(headers.count).deinitialize() }
                return try body(UnsafeBufferPointer(rebasing: nva.prefix(headers.count)))
            }
        }
    }

    /// The name/value array of `first`, then `last`, pointing into their bytes, which nghttp2 reads where they lie
    /// (no copy) when it encodes the frame: the caller holds the blocks until then.
    private func withNameValues<T>(
        _ first: HTTP2HeaderBlock, _ last: HTTP2HeaderBlock, _ body: (UnsafeBufferPointer<nghttp2_nv>) -> T
    ) -> T {
        let count = first.count + last.count
        return withUnsafeTemporaryAllocation(of: nghttp2_nv.self, capacity: count) { nva in
            first.bytes.withUnsafeBufferPointer { firstBytes in
                last.bytes.withUnsafeBufferPointer { lastBytes in
                    var index = 0
                    let indexesUniqueValues = !uniqueValueNamesIndexed
                    func add(_ name: UnsafeBufferPointer<UInt8>, _ value: UnsafeBufferPointer<UInt8>, _ indexing: HTTP2HeaderBlock.Indexing) {
                        let indexed =
                            switch indexing {
                            case .indexed: true
                            case .never: false
                            case .uniqueValue: indexesUniqueValues
                            }
                        nva.initializeElement(
                            at: index,
                            to: nghttp2_nv(
                                name: UnsafeMutablePointer(mutating: name.baseAddress ?? Self.empty.utf8Start),
                                value: UnsafeMutablePointer(mutating: value.baseAddress ?? Self.empty.utf8Start),
                                namelen: name.count, valuelen: value.count,
                                flags: UInt8(indexed ? Self.notCopied : Self.notCopied | NGHTTP2_NV_FLAG_NO_INDEX.rawValue)))
                        index += 1
                    }
                    HTTP2HeaderBlock.forEach(in: firstBytes, add)
                    HTTP2HeaderBlock.forEach(in: lastBytes, add)
                    defer { _ = nva.prefix(index).deinitialize() }
                    return body(UnsafeBufferPointer(rebasing: nva.prefix(index)))
                }
            }
        }
    }

    /// What an empty name or value points at (nghttp2 reads no byte of it, but wants a pointer).
    private static let empty: StaticString = ""

    private static let notCopied = NGHTTP2_NV_FLAG_NO_COPY_NAME.rawValue | NGHTTP2_NV_FLAG_NO_COPY_VALUE.rawValue

    private func withDataProvider<T>(_ body: (UnsafePointer<nghttp2_data_provider>) -> T) -> T {
        var provider = nghttp2_data_provider(source: nghttp2_data_source(ptr: nil), read_callback: readBodyCallback)
        return withUnsafePointer(to: &provider) { body($0) }
    }

    fileprivate func readBody(_ stream: Int32, into buffer: UnsafeMutablePointer<UInt8>, length: Int, flags: UnsafeMutablePointer<UInt32>) -> Int {
        // Read and advanced where it lies (a mutating call on `values[index]`): one lookup, and no copy of the entry,
        // which reading its fields through the subscript made each time (nine copies a request).
        guard let index = outgoing.index(forKey: stream) else {
            flags.pointee |= NGHTTP2_DATA_FLAG_EOF.rawValue
            return 0
        }
        let (count, done) = outgoing.values[index].copyBody(into: buffer, length: length)
        if done {
            flags.pointee |= NGHTTP2_DATA_FLAG_EOF.rawValue
            // DATA follows HEADERS, so the headers were encoded: nothing more is read from the entry.
            outgoing.remove(at: index)
        }
        return count
    }

    fileprivate func frameReceived(_ frame: UnsafePointer<nghttp2_frame>) {
        let header = frame.pointee.hd
        let endStream = header.flags & UInt8(NGHTTP2_FLAG_END_STREAM.rawValue) != 0
        switch UInt32(header.type) {
        case NGHTTP2_HEADERS.rawValue, NGHTTP2_DATA.rawValue:
            if endStream { delegate.streamEnded(header.stream_id) }
        case NGHTTP2_SETTINGS.rawValue:
            if header.flags & UInt8(NGHTTP2_FLAG_ACK.rawValue) == 0 { delegate.settingsReceived() }
        case NGHTTP2_PING.rawValue:
            if header.flags & UInt8(NGHTTP2_FLAG_ACK.rawValue) != 0 { delegate.pingAcknowledged() }
        case NGHTTP2_GOAWAY.rawValue:
            let goaway = frame.pointee.goaway
            let debug = goaway.opaque_data.map { Array(UnsafeBufferPointer(start: $0, count: goaway.opaque_data_len)) } ?? []
            delegate.goAwayReceived(lastStreamID: goaway.last_stream_id, errorCode: goaway.error_code, debugData: debug)
        default:
            break
        }
    }

    fileprivate func streamDone(_ stream: Int32) { outgoing[stream] = nil }
}

// MARK: - C callbacks. Each recovers the session from user_data (unretained, see init) and calls one method.

/// Runs `body` with the session `userData` points at, without retaining it: nghttp2 calls back only from inside
/// the session's own `receive` and `send`, whose caller holds the session (its transport keeps it for life and never
/// lets go of it), so it is alive throughout. `takeUnretainedValue` was a retain and a release on every callback,
/// several a request (perf, thirtieth session).
private func withSession<Result>(_ userData: UnsafeMutableRawPointer?, _ body: (HTTP2Session) -> Result) -> Result {
    guard let userData else { preconditionFailure("nghttp2 callback without user data") }
    return Unmanaged<HTTP2Session>.fromOpaque(userData)._withUnsafeGuaranteedRef(body)
}

private let onBeginHeaders: nghttp2_on_begin_headers_callback = { _, frame, userData in
    guard let frame else { return 0 }
    if UInt32(frame.pointee.hd.type) == NGHTTP2_HEADERS.rawValue, frame.pointee.headers.cat == NGHTTP2_HCAT_REQUEST {
        withSession(userData) { $0.delegate.streamOpened(frame.pointee.hd.stream_id) }
    }
    return 0
}

private let onHeader: nghttp2_on_header_callback = { _, frame, name, nameLength, value, valueLength, _, userData in
    guard let frame, let name else { return 0 }
    withSession(userData) {
        $0.delegate.headerReceived(
            frame.pointee.hd.stream_id, name: UnsafeRawBufferPointer(start: name, count: nameLength),
            value: UnsafeRawBufferPointer(start: value, count: value == nil ? 0 : valueLength))
    }
    return 0
}

private let onDataChunk: nghttp2_on_data_chunk_recv_callback = { _, _, stream, data, length, userData in
    guard let data else { return 0 }
    let accepted = withSession(userData) { $0.delegate.dataReceived(stream, UnsafeRawBufferPointer(start: data, count: length)) }
    // Refusing data (a body too large) resets just that stream.
    return accepted ? 0 : NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE.rawValue
}

private let onFrame: nghttp2_on_frame_recv_callback = { _, frame, userData in
    guard let frame else { return 0 }
    withSession(userData) { $0.frameReceived(frame) }
    return 0
}

private let onStreamClose: nghttp2_on_stream_close_callback = { _, stream, errorCode, userData in
    withSession(userData) { session in
        session.streamDone(stream)
        session.delegate.streamClosed(stream, errorCode: errorCode)
    }
    return 0
}

private let readBodyCallback: nghttp2_data_source_read_callback = { _, stream, buffer, length, flags, _, userData in
    guard let buffer, let flags else { return Int(NGHTTP2_ERR_CALLBACK_FAILURE.rawValue) }
    return withSession(userData) { $0.readBody(stream, into: buffer, length: length, flags: flags) }
}
