/// A request to send on an HTTP/2 connection.
public struct HTTP2Request: Sendable {
    public var method: String
    /// `:path`, never indexed in HPACK (Apple asks for that: it holds the device token).
    public var path: String
    public var headers: HTTP2HeaderBlock
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

    /// With the headers already laid out (the deliverer builds them once per push).
    public init(method: String = "POST", path: String, headerBlock: HTTP2HeaderBlock, body: [UInt8] = []) {
        self.method = method
        self.path = path
        self.headers = headerBlock
        self.body = body
    }
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
