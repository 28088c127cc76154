import Synchronization
import Threading

/// Resumes of suspended connections that responders have taken on and not yet made. A responder resumes after
/// releasing the answer's lock (see `ConnectionResponder.respond`), so between the two a connection is answered but
/// still suspended; `HTTPServer.stop` waits for none to be underway before it stops libmicrohttpd, which aborts the
/// process when stopped with a connection suspended, and which a late resume would find gone.
final class ResumesUnderway: Sendable {
    private let count = Atomic<Int>(0)
    private let none = WakeUp()

    /// A responder took on a resume: called under the answer's lock, so that `stop`, whose own answer to the same
    /// request takes that lock after it, counts it.
    func begin() { count.wrappingAdd(1, ordering: .sequentiallyConsistent) }

    /// The resume was made.
    func end() {
        if count.wrappingSubtract(1, ordering: .sequentiallyConsistent).newValue == 0 { none.signal() }
    }

    /// Returns once no resume is underway (one thread at a time: `stop`).
    func waitForNone() {
        while count.load(ordering: .sequentiallyConsistent) > 0 { none.wait(until: nil) }
    }
}
