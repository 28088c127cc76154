/// A request to send on an HTTP/2 connection.
public struct HTTP2Request: Sendable {
    public var method: String
    /// `:path`, then the headers, laid out the way nghttp2 takes them (`HTTP2HeaderBlock(path:)`). `:path` is never
    /// indexed in HPACK (Apple asks for that: it holds the device token). One buffer, not a path String beside a
    /// block: the loop copies a request several times on its way to nghttp2, a reference count per part each time,
    /// and nghttp2 reads the headers where they lie (`HTTP2Session.submitRequest`).
    public private(set) var head: HTTP2HeaderBlock
    public var body: [UInt8]

    /// `sensitiveHeaders`: names never added to the HPACK dynamic table (besides `:path`, which never is).
    public init(
        method: String = "POST", path: String, headers: [(String, String)] = [], body: [UInt8] = [],
        sensitiveHeaders: Set<String> = []
    ) {
        var block = HTTP2HeaderBlock()
        for (name, value) in headers { block.append(name, value, indexing: sensitiveHeaders.contains(name.lowercased()) ? .never : .indexed) }
        self.init(method: method, path: path, headerBlock: block, body: body)
    }

    /// With the headers already laid out.
    public init(method: String = "POST", path: String, headerBlock: HTTP2HeaderBlock, body: [UInt8] = []) {
        var head = HTTP2HeaderBlock(path: path)
        head.append(contentsOf: headerBlock)
        self.init(method: method, head: head, body: body)
    }

    /// With `:path` and the headers already laid out in `head`, which starts with `HTTP2HeaderBlock(path:)` (the
    /// deliverer builds it once per push).
    public init(method: String = "POST", head: HTTP2HeaderBlock, body: [UInt8] = []) {
        precondition(head.startsWithPath, "a request's head starts with :path (HTTP2HeaderBlock(path:))")
        self.method = method
        self.head = head
        self.body = body
    }

    /// `:path` (tests, and whoever reads a request back).
    public var path: String { head.fields.first?.value ?? "" }

    /// The headers after `:path` (tests, and whoever reads a request back).
    public var headers: HTTP2HeaderBlock { head.droppingFirst() }
}

/// A complete response.
public struct HTTP2Response: Sendable, Equatable {
    public var status: Int
    /// Every header but `:status`; empty on a connection without `Configuration.keepsResponseHeaders`.
    public var headers: [String: String]
    public var body: [UInt8]

    public init(status: Int, headers: [String: String] = [:], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }
}

/// Why a request got no response. Each says whether the server can have processed it.
public enum HTTP2Failure: Error, Sendable, Equatable {
    /// Not processed (REFUSED_STREAM, above a GOAWAY's last stream, or never sent): resend at once, anywhere.
    case refused
    /// The connection ended with the request in flight: it may or may not have been processed.
    case connectionLost(String)
    /// No response within the request timeout; the stream was cancelled.
    case timedOut
    /// The server reset the stream with this HTTP/2 error code.
    case reset(UInt32)
}
