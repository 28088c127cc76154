import Testing

@testable import Common

#if canImport(Glibc)
    import Glibc
#endif

/// The /proc parsing behind `process_start_time_seconds` and `process_resident_memory_bytes`; the e2e test
/// (test_metrics_exposition.py) checks the figures against the kernel's for a running relay.
@Suite struct ProcessMetricsTests {
    /// A command name may hold spaces and parentheses: fields are counted from the last `)`.
    @Test func theStartTimeCountsFieldsAfterTheCommandName() {
        let fieldsAfterName = (3...52).map { $0 == 22 ? "12345" : "7" }.joined(separator: " ")
        let stat = "4242 (kuma (push) relay) " + fieldsAfterName + "\n"
        let system = "cpu  1 2 3\nbtime 1796300000\nprocesses 9\n"
        #expect(ProcessMetrics.startSeconds(stat: stat, systemStat: system, ticksPerSecond: 100) == 1_796_300_123.45)
    }

    @Test func aStatWithoutBootTimeGivesNoStartTime() {
        let stat = "1 (x) " + Array(repeating: "1", count: 50).joined(separator: " ")
        #expect(ProcessMetrics.startSeconds(stat: stat, systemStat: "cpu 1 2 3\n", ticksPerSecond: 100) == nil)
    }

    @Test func residentMemoryIsStatmsSecondField() {
        #expect(ProcessMetrics.residentPages(statm: "5000 1234 300 10 0 900 0\n") == 1234)
        #expect(ProcessMetrics.residentPages(statm: "") == nil)
    }

    /// `process_open_fds` is the process's own descriptors, by the kernel's count where it gives one (`stat` on
    /// /proc/self/fd, Linux 6.2 and later; this host's kernel is newer) and by listing the directory otherwise: the
    /// two agree, and a descriptor opened counts one more. Other tests run in parallel and open files too, so each
    /// check is tried until one pass is undisturbed.
    @Test func openDescriptorsAreCountedAlikeEitherWay() {
        func holdsOnce(_ check: () -> Bool) -> Bool {
            for _ in 0..<100 where check() { return true }
            return false
        }
        #expect(holdsOnce { ProcessMetrics.openDescriptorCount() == ProcessMetrics.listedDescriptorCount() })
        #expect(
            holdsOnce {
                let before = ProcessMetrics.openDescriptorCount()
                let extra = open("/dev/null", O_RDONLY | O_CLOEXEC)
                defer { if extra >= 0 { close(extra) } }
                return extra >= 0 && ProcessMetrics.openDescriptorCount() == before.map { $0 + 1 }
            })
    }
}
