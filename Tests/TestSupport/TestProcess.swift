import Foundation

/// What the relay binary does for itself at start-up that the in-process tests must do for the test runner.
public enum TestProcess {
    /// The binary ignores SIGPIPE (TerminationSignals): a peer that closes mid-write gives EPIPE to the one write
    /// instead of killing the process. Components run in-process here, so the test runner must ignore it too, or
    /// one closed socket or pipe ends every test at once ("exited with unexpected signal code 13").
    public static let ignoresSIGPIPE: Void = { _ = signal(SIGPIPE, SIG_IGN) }()
}
