import Foundation
import Synchronization
import Threading

/// Requests handed to the handler and not yet completed: the ones shutdown must answer itself.
///
/// libmicrohttpd 0.9.x aborts the process in `MHD_stop_daemon` while any connection is still suspended (issue 12), so
/// before stopping, the server closes this set (no request is dispatched after that; late ones get the shutdown
/// answer at once), answers every request still in it, and waits for those answers to be sent.
final class DispatchedRequests: Sendable {
    private struct State {
        var closed = false
        var requests: [ObjectIdentifier: RequestContext] = [:]
    }

    private let state = Mutex(State())
    /// Signalled when the last request completes after `close`.
    private let emptied = WakeUp()

    /// Records a request about to be dispatched; false once the server is stopping.
    func admit(_ context: RequestContext) -> Bool {
        state.withLock { state in
            guard !state.closed else { return false }
            state.requests[ObjectIdentifier(context)] = context
            return true
        }
    }

    /// The request is over (answered and sent, or its connection failed).
    func completed(_ context: RequestContext) {
        let lastAfterClose = state.withLock { state in
            state.requests[ObjectIdentifier(context)] = nil
            return state.closed && state.requests.isEmpty
        }
        // Only shutdown waits, so only then is a signal needed.
        if lastAfterClose { emptied.signal() }
    }

    /// Admits nothing more; returns the requests still in flight.
    func close() -> [RequestContext] {
        state.withLock { state in
            state.closed = true
            return Array(state.requests.values)
        }
    }

    /// Waits until every admitted request has completed, at most `timeout`. Returns whether they all did.
    func waitUntilEmpty(timeout: Duration) -> Bool {
        let deadline = ContinuousClock.now + timeout
        while !state.withLock({ $0.requests.isEmpty }) {
            if !emptied.wait(until: deadline) { return state.withLock { $0.requests.isEmpty } }
        }
        return true
    }
}
