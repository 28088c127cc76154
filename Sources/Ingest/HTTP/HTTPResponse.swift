import Common

/// A response to send. Every response of the relay is JSON (SPEC §2), so the content type is set by the server.
public struct HTTPResponse: Sendable, Equatable {
    public var status: Int
    public var headers: [(String, String)]
    public var body: [UInt8]

    public init(status: Int, headers: [(String, String)] = [], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// `{"error":"<message>"}` with `status`.
    public static func error(_ status: Int, _ message: String, headers: [(String, String)] = []) -> HTTPResponse {
        HTTPResponse(status: status, headers: headers, body: Array("{\"error\":\(JSONText.quoted(message))}".utf8))
    }

    /// A JSON body built by hand (callers pass valid JSON text).
    public static func json(_ status: Int, _ text: String, headers: [(String, String)] = []) -> HTTPResponse {
        HTTPResponse(status: status, headers: headers, body: Array(text.utf8))
    }

    public static func == (lhs: HTTPResponse, rhs: HTTPResponse) -> Bool {
        lhs.status == rhs.status && lhs.body == rhs.body && lhs.headers.map { "\($0.0):\($0.1)" } == rhs.headers.map { "\($0.0):\($0.1)" }
    }
}

/// Answers one request exactly once, now or later, from any thread. An unanswered responder would leave the
/// client waiting until it times out, so every code path must call `respond`.
public protocol HTTPResponder: Sendable {
    func respond(_ response: HTTPResponse)
}
