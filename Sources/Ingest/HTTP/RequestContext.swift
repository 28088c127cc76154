internal import CMicroHTTPD
import Common
import Synchronization

/// Everything known about one request while libmicrohttpd works on it, from the URI log callback (which creates
/// it) to the completion callback (which releases it).
///
/// MHD calls the access handler for a connection from one thread at a time, so the receiving phase needs no lock.
/// The answer may come from another thread (the queue writer), so `answer` is behind a mutex.
final class RequestContext: @unchecked Sendable {
    // @unchecked Sendable: the fields outside `answer` are only touched by the MHD thread currently serving this
    // connection (MHD never runs two callbacks of one connection at once); `answer` is guarded by its Mutex.

    enum Phase {
        case new, receiving, dispatched
        /// The body is over the limit: read and drop the rest, then answer 413. Answering while the client is still
        /// sending makes the kernel reset the connection on close, and the client may never see the 413.
        case discarding(budget: Int)
    }

    let rawURI: String
    var phase = Phase.new
    var body: [UInt8] = []
    var formFields: [(name: String, value: [UInt8])] = []
    var postProcessor: OpaquePointer?
    /// The connection, valid from the first access-handler call until the completion callback.
    var connection: OpaquePointer?
    /// Handed to the handler and recorded in the server's `DispatchedRequests`.
    var admitted = false

    struct Answer {
        var response: HTTPResponse?
        var suspended = false
        var completed = false
    }

    let answer = Mutex(Answer())

    init(rawURI: String) { self.rawURI = rawURI }

    /// Path and raw query split from the request target.
    var pathAndQuery: (path: String, query: String) {
        guard let mark = rawURI.firstIndex(of: "?") else { return (rawURI, "") }
        return (String(rawURI[..<mark]), String(rawURI[rawURI.index(after: mark)...]))
    }
}

/// The responder handed to request handlers: stores the answer and resumes the suspended connection.
struct ConnectionResponder: HTTPResponder {
    let context: RequestContext

    func respond(_ response: HTTPResponse) {
        context.answer.withLock { answer in
            guard answer.response == nil, !answer.completed else { return }
            answer.response = response
            // Resume under the lock so it can never run before the handler thread's suspend (also under the lock).
            if answer.suspended, let connection = context.connection {
                answer.suspended = false
                MHD_resume_connection(connection)
            }
        }
    }
}
