internal import CMicroHTTPD
import Common

// The C callbacks of the HTTP server. Each guards its pointers, recovers its Swift owner and calls one method.
// Nothing throws or suspends across C.

/// MHD_OPTION_URI_LOG_CALLBACK: the first call for a request, with the raw request target (query included).
/// Its return value becomes the request's `con_cls`: a retained `RequestContext`, released in `requestCompleted`.
let uriLogged: CMicroHTTPD_URILogCallback = { serverPointer, uri, connection in
    guard let serverPointer else { preconditionFailure("uriLogged: no server") }
    let server = Unmanaged<HTTPServer>.fromOpaque(serverPointer).takeUnretainedValue()
    server.inFlight.increment()
    server.requestHeartbeat.beat()
    if let connection {
        server.connectionGuard?.requestStarted(connection)
        server.unheard?.heard(CMicroHTTPD_connection_fd(connection))
    }
    let context = RequestContext(rawURI: uri.map { String(cString: $0) } ?? "/")
    return Unmanaged.passRetained(context).toOpaque()
}

/// MHD_OPTION_NOTIFY_COMPLETED: the request is over (answered, or the connection failed). Releases the context.
let requestCompleted: MHD_RequestCompletedCallback = { serverPointer, connection, contextSlot, _ in
    guard let serverPointer, let contextSlot, let raw = contextSlot.pointee else { return }
    let server = Unmanaged<HTTPServer>.fromOpaque(serverPointer).takeUnretainedValue()
    if let connection { server.connectionGuard?.requestCompleted(connection) }
    // Balances passRetained in uriLogged.
    let context = Unmanaged<RequestContext>.fromOpaque(raw).takeRetainedValue()
    contextSlot.pointee = nil
    if let processor = context.postProcessor { MHD_destroy_post_processor(processor) }
    context.postProcessor = nil
    context.answer.withLock { answer in
        answer.completed = true
        context.connection = nil
    }
    if context.admitted { server.dispatched.completed(context) }
    server.inFlight.decrement()
}

/// MHD_AcceptPolicyCallback: whether to accept a connection from this peer — never while draining, else the
/// per-client cap.
let acceptPolicy: MHD_AcceptPolicyCallback = { serverPointer, address, _ in
    guard let serverPointer else { preconditionFailure("acceptPolicy: no server") }
    let server = Unmanaged<HTTPServer>.fromOpaque(serverPointer).takeUnretainedValue()
    if server.draining.load(ordering: .relaxed) { return .NO }
    return server.connectionGuard?.mayAccept(SocketAddress.address(of: address)) == false ? .NO : .YES
}

/// MHD_NotifyConnectionCallback: a connection opened or closed. Set only when the server has a `ConnectionGuard`
/// or tracks `unheard` connections.
let connectionNotified: MHD_NotifyConnectionCallback = { serverPointer, connection, _, event in
    guard let serverPointer, let connection else { return }
    let server = Unmanaged<HTTPServer>.fromOpaque(serverPointer).takeUnretainedValue()
    switch event {
    case .CONNECTION_NOTIFY_STARTED:
        server.handedOver?.takenUp()
        server.connectionGuard?.opened(
            connection, descriptor: CMicroHTTPD_connection_fd(connection),
            address: SocketAddress.address(of: CMicroHTTPD_client_address(connection)))
    default:
        server.connectionGuard?.closed(connection)
        if let unheard = server.unheard {
            unheard.heard(CMicroHTTPD_connection_fd(connection))
            server.inFlight.poke()
        }
    }
}

/// MHD_OPTION_EXTERNAL_LOGGER, through the shim's formatter: one line of libmicrohttpd's error log.
let libraryMessageLogged: CMicroHTTPD_MessageCallback = { serverPointer, format, message in
    guard let serverPointer, let format, let message else { return }
    let server = Unmanaged<HTTPServer>.fromOpaque(serverPointer).takeUnretainedValue()
    server.libraryLogged(LibraryMessage(format: String(cString: format), message: String(cString: message)))
}

/// MHD_AccessHandlerCallback: called with the headers, then with each body chunk, then once more with none.
let accessHandler: MHD_AccessHandlerCallback = { serverPointer, connection, url, method, _, uploadData, uploadSize, contextSlot in
    guard let serverPointer, let connection, let uploadSize, let contextSlot, let raw = contextSlot.pointee else {
        return .NO
    }
    let server = Unmanaged<HTTPServer>.fromOpaque(serverPointer).takeUnretainedValue()
    let context = Unmanaged<RequestContext>.fromOpaque(raw).takeUnretainedValue()
    return server.handle(
        connection: connection, context: context, url: url, method: method,
        uploadData: uploadData, uploadSize: uploadSize)
}

/// MHD_PostDataIterator: one decoded piece of a form field. `cls` is the request's context (unretained: the post
/// processor is destroyed in `requestCompleted` before the context is released).
let formFieldReceived: MHD_PostDataIterator = { contextPointer, _, key, _, _, _, data, offset, size in
    guard let contextPointer, let key else { return .NO }
    let context = Unmanaged<RequestContext>.fromOpaque(contextPointer).takeUnretainedValue()
    let name = String(cString: key)
    let bytes = data.map { Array(UnsafeRawBufferPointer(start: $0, count: size)) } ?? []
    if offset > 0, let last = context.formFields.indices.last, context.formFields[last].name == name {
        context.formFields[last].value += bytes
    } else {
        context.formFields.append((name, bytes))
    }
    return .YES
}

/// MHD_KeyValueIterator over request headers; `cls` points at the dictionary being filled.
let headerReceived: MHD_KeyValueIterator = { headersPointer, _, key, value in
    guard let headersPointer, let key else { return .YES }
    let headers = headersPointer.assumingMemoryBound(to: [String: String].self)
    let name = String(cString: key).lowercased()
    let text = value.map { String(cString: $0) } ?? ""
    if let existing = headers.pointee[name] {
        headers.pointee[name] = existing + ", " + text
    } else {
        headers.pointee[name] = text
    }
    return .YES
}

extension HTTPServer {
    /// Bytes of an oversized body read and dropped before answering 413 anyway (and closing).
    static let discardBudget = 1024 * 1024

    func handle(
        connection: OpaquePointer, context: RequestContext, url: UnsafePointer<CChar>?, method: UnsafePointer<CChar>?,
        uploadData: UnsafePointer<CChar>?, uploadSize: UnsafeMutablePointer<Int>
    ) -> MHD_Result {
        switch context.phase {
        case .new:
            context.phase = .receiving
            context.connection = connection
            if let length = lookupHeader(connection, "Content-Length").flatMap(Int.init), length > configuration.maxBodyBytes {
                context.phase = .discarding(budget: Self.discardBudget)
                return .YES
            }
            // NULL unless the body is multipart/form-data or application/x-www-form-urlencoded.
            context.postProcessor = MHD_create_post_processor(
                connection, 16 * 1024, formFieldReceived,
                Unmanaged.passUnretained(context).toOpaque())
            return .YES
        case .receiving where uploadSize.pointee > 0:
            let size = uploadSize.pointee
            uploadSize.pointee = 0
            guard context.body.count + size <= configuration.maxBodyBytes, let uploadData else {
                // Chunked bodies have no Content-Length: the cap is enforced as bytes arrive.
                context.body = []
                context.phase = .discarding(budget: Self.discardBudget - size)
                return .YES
            }
            context.body.append(contentsOf: UnsafeRawBufferPointer(start: uploadData, count: size))
            if let processor = context.postProcessor, MHD_post_process(processor, uploadData, size) != .YES {
                // Malformed form encoding: stop decoding; the handler sees no fields and answers 400.
                MHD_destroy_post_processor(processor)
                context.postProcessor = nil
                context.formFields = []
            }
            return .YES
        case .receiving:
            context.phase = .dispatched
            connectionGuard?.requestReceived(connection)
            guard dispatched.admit(context) else { return queue(Self.shuttingDownResponse, on: connection) }
            context.admitted = true
            var headers: [String: String] = [:]
            _ = withUnsafeMutablePointer(to: &headers) { MHD_get_connection_values(connection, .HEADER_KIND, headerReceived, $0) }
            let (_, query) = context.pathAndQuery
            let request = HTTPRequest(
                method: method.map { String(cString: $0) } ?? "GET",
                path: url.map { String(cString: $0) } ?? "/",
                rawQuery: query, headers: headers, body: context.body, formFields: context.formFields,
                peer: SocketAddress.address(of: CMicroHTTPD_client_address(connection)))
            context.body = []
            handler(request, ConnectionResponder(context: context, resumes: resumes))
            return context.answer.withLock { answer -> MHD_Result in
                if let response = answer.response {
                    return queue(response, on: connection)
                }
                // No answer yet: park the connection until the responder resumes it.
                answer.suspended = true
                MHD_suspend_connection(connection)
                return .YES
            }
        case .discarding(let budget) where uploadSize.pointee > 0:
            let size = uploadSize.pointee
            uploadSize.pointee = 0
            guard budget - size > 0 else {
                // A client that keeps sending far past the limit gets its answer now, and the connection closes.
                context.phase = .dispatched
                return queue(Self.tooLargeResponse, on: connection)
            }
            context.phase = .discarding(budget: budget - size)
            return .YES
        case .discarding:
            context.phase = .dispatched
            return queue(Self.tooLargeResponse, on: connection)
        case .dispatched:
            // Called again after a resume: the answer is there now.
            guard let response = context.answer.withLock({ $0.response }) else { return .YES }
            return queue(response, on: connection)
        }
    }

    private func lookupHeader(_ connection: OpaquePointer, _ name: String) -> String? {
        MHD_lookup_connection_value(connection, .HEADER_KIND, name).map { String(cString: $0) }
    }

    private func queue(_ response: HTTPResponse, on connection: OpaquePointer) -> MHD_Result {
        let handle = response.body.withUnsafeBytes { raw in
            MHD_create_response_from_buffer(raw.count, UnsafeMutableRawPointer(mutating: raw.baseAddress), .RESPMEM_MUST_COPY)
        }
        guard let handle else { return .NO }
        defer { MHD_destroy_response(handle) }
        // Every API response is JSON (SPEC §2), including 204s; the metrics listener sets its own type.
        if !response.headers.contains(where: { $0.0.lowercased() == "content-type" }) {
            MHD_add_response_header(handle, "Content-Type", "application/json")
        }
        for (name, value) in response.headers { MHD_add_response_header(handle, name, value) }
        // Draining: a kept-alive client is told to reconnect for its next request (to the next process, under socket
        // activation) rather than send it on a connection about to close.
        if draining.load(ordering: .relaxed) { MHD_add_response_header(handle, "Connection", "close") }
        return MHD_queue_response(connection, UInt32(response.status), handle)
    }
}
