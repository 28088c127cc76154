import TestSupport
import Testing

/// The in-process tests close sockets under writes on purpose (clients that hang up, servers that reset): the test
/// runner must ignore SIGPIPE from the start, whichever suite runs first, as the binary does for itself.
@Suite struct TestRunnerSignalTests {
    @Test func sigpipeIsIgnoredBeforeAnyTestStarts() {
        #expect(TestProcess.ignoredSIGPIPEBeforeAnyTest)
        #expect(TestProcess.ignoresSIGPIPE)
    }
}
