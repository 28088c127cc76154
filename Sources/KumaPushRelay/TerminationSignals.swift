import Foundation

/// SIGTERM and SIGINT, delivered to one waiting thread instead of interrupting whichever thread runs.
///
/// `block()` must run before any thread is started (threads inherit the signal mask), so no library thread ever
/// takes the signal; `wait()` then receives it synchronously with sigwait(2).
enum TerminationSignals {
    static func block() {
        var set = signalSet()
        pthread_sigmask(SIG_BLOCK, &set, nil)
        // A closed pipe (client gone mid-response) must not kill the process.
        signal(SIGPIPE, SIG_IGN)
        // Nor a file-size limit: SQLite then gets EFBIG, and the relay answers 503 like for a full disk.
        signal(SIGXFSZ, SIG_IGN)
    }

    /// Blocks until SIGTERM or SIGINT arrives; returns its name.
    static func wait() -> String {
        var set = signalSet()
        var received: Int32 = 0
        sigwait(&set, &received)
        return received == SIGINT ? "SIGINT" : "SIGTERM"
    }

    /// Blocks until SIGTERM or SIGINT arrives or `timeout` passes; the signal's name, or nil when none came.
    static func wait(timeout: Duration) -> String? {
        var set = signalSet()
        let (seconds, attoseconds) = timeout.components
        var limit = timespec(tv_sec: Int(seconds), tv_nsec: Int(attoseconds / 1_000_000_000))
        while true {
            let received = sigtimedwait(&set, nil, &limit)
            if received == SIGINT { return "SIGINT" }
            if received == SIGTERM { return "SIGTERM" }
            // EAGAIN: the time passed. EINTR (another signal's handler ran) would restart the whole wait, so a
            // stray signal could only lengthen it; no handler is installed, so it does not happen.
            if errno != EINTR { return nil }
        }
    }

    private static func signalSet() -> sigset_t {
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, SIGTERM)
        sigaddset(&set, SIGINT)
        return set
    }
}
