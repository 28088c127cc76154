import TestRunnerSignals

/// What the relay binary does for itself at start-up that the in-process tests must do for the test runner.
public enum TestProcess {
    /// The binary ignores SIGPIPE (TerminationSignals): a peer that closes mid-write gives EPIPE to the one write
    /// instead of killing the process. Components run in-process here, so the test runner ignores it too, from a C
    /// constructor that runs before any suite starts (`TestRunnerSignals`). Until the twenty-eighth session the first
    /// suite that opened a socket set it, so it depended on which suites the runner started first.
    public static var ignoredSIGPIPEBeforeAnyTest: Bool { test_runner_ignored_sigpipe_at_load() != 0 }

    /// SIGPIPE is ignored now (no test has put its default back).
    public static var ignoresSIGPIPE: Bool { test_runner_ignores_sigpipe_now() != 0 }
}
