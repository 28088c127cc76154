import Common

/// One HTTP request, fully received (bodies are capped, so buffering them is bounded).
public struct HTTPRequest: Sendable {
    public var method: String
    /// Percent-decoded path without the query, e.g. `/wh/V1StGXR8_Z5jdH`.
    public var path: String
    /// The raw query string after `?`, undecoded ("" when absent).
    public var rawQuery: String
    /// Header names lower-cased; a repeated header keeps its values joined with ", " (RFC 9110 §5.3).
    public var headers: [String: String]
    public var body: [UInt8]
    /// Fields libmicrohttpd's post processor decoded from a multipart or urlencoded body, in arrival order.
    public var formFields: [(name: String, value: [UInt8])]
    /// The TCP peer (not yet adjusted for proxies).
    public var peer: IPAddress?

    public init(
        method: String, path: String, rawQuery: String = "", headers: [String: String] = [:], body: [UInt8] = [],
        formFields: [(name: String, value: [UInt8])] = [], peer: IPAddress? = nil
    ) {
        self.method = method
        self.path = path
        self.rawQuery = rawQuery
        self.headers = headers
        self.body = body
        self.formFields = formFields
        self.peer = peer
    }

    public func header(_ name: String) -> String? { headers[name.lowercased()] }

    /// The media type of `Content-Type` without parameters, lower-cased (`application/json`).
    public var mediaType: String? {
        guard let value = headers["content-type"] else { return nil }
        // The usual case, exactly "application/json", without splitting and lower-casing.
        if value == "application/json" { return value }
        return value.split(separator: ";", maxSplits: 1).first.map { $0.trimmingWhitespace().lowercased() } ?? ""
    }
}
