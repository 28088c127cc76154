/// One line of libmicrohttpd's error log, sorted by what the relay does with it.
///
/// libmicrohttpd answers some requests itself, before any handler runs: a URL or headers longer than the
/// connection's buffer (`HTTP_MAX_HEADER_BYTES`) get 414 or 431, a malformed request 400. Its log is the only place
/// those refusals show, and a GET webhook refused this way is a lost alert, so the server counts them.
public enum LibraryMessage: Equatable, Sendable {
    /// libmicrohttpd answered a request with this error status itself; the relay never saw the request.
    case refusedRequest(status: Int)
    /// Anything else, by its format alone: fixed text with placeholders, never a client's bytes (a formatted
    /// message may hold a request's URL, which carries the device id and a GET webhook's alert).
    case other(format: String)

    /// Sorts a message; `format` is the printf format it was made from.
    public init(format: String, message: String) {
        if let status = Self.refusalStatus(in: message) {
            self = .refusedRequest(status: status)
        } else {
            self = .other(format: String(format.prefix { $0 != "\n" }))
        }
    }

    /// The status in "Error processing request (HTTP response code is 414 (…)). Closing connection." — the line
    /// libmicrohttpd 0.9.75 logs for every error it answers itself (`transmit_error_response`).
    private static func refusalStatus(in message: String) -> Int? {
        let prefix = "Error processing request (HTTP response code is "
        guard message.hasPrefix(prefix) else { return nil }
        let digits = message.dropFirst(prefix.count).prefix { $0.isASCII && $0.isNumber }
        guard digits.count == 3, let status = Int(digits) else { return nil }
        return status
    }
}
