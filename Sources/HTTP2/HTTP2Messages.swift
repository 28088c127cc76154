/// A request to send on an HTTP/2 connection.
public struct HTTP2Request: Sendable {
    public var method: String
    public var path: String
    public var headers: [(String, String)]
    public var body: [UInt8]
    /// Header names never added to the HPACK dynamic table (besides `:path`, which never is).
    public var sensitiveHeaders: Set<String>

    public init(
        method: String = "POST", path: String, headers: [(String, String)] = [], body: [UInt8] = [],
        sensitiveHeaders: Set<String> = []
    ) {
        self.method = method
        self.path = path
        self.headers = headers
        self.body = body
        self.sensitiveHeaders = sensitiveHeaders
    }
}

/// A complete response.
public struct HTTP2Response: Sendable, Equatable {
    public var status: Int
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
