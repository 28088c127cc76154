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

    private static func signalSet() -> sigset_t {
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, SIGTERM)
        sigaddset(&set, SIGINT)
        return set
    }
}
