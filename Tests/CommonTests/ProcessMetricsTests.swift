import Testing

@testable import Common

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
}
