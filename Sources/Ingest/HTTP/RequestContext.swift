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
    /// The server's count of resumes taken on and not yet made, which its stop waits for.
    let resumes: ResumesUnderway

    func respond(_ response: HTTPResponse) {
        let suspended = context.answer.withLock { answer -> OpaquePointer? in
            guard answer.response == nil, !answer.completed else { return nil }
            answer.response = response
            // The handler thread suspends the connection and marks it so in one hold of this lock: a connection
            // seen suspended here is one, and only this answer resumes it.
            guard answer.suspended, let connection = context.connection else { return nil }
            answer.suspended = false
            resumes.begin()
            return connection
        }
        // Resumed after the lock is released: the resume wakes an MHD thread, whose first step is to take this lock
        // for the answer, and under the lock it waited for this thread to let go (4.7 % of the MHD threads' samples
        // were in the mutex's slow path, a priority-inheritance futex system call each time). The connection cannot
        // go meanwhile: libmicrohttpd neither serves nor completes a suspended connection, and the server's stop
        // waits for the resumes underway before it stops libmicrohttpd.
        if let suspended {
            MHD_resume_connection(suspended)
            resumes.end()
        }
    }
}
