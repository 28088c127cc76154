import Common
import Testing

/// Issue 13: nothing removes a series, so the registry bounds what callers could otherwise grow without end.
@Suite struct MetricsRegistryTests {
    @Test func aFamilyStopsAtItsSeriesLimitAndCountsWhatItDrops() {
        let metrics = MetricsRegistry()
        metrics.describe("requests_total", .counter, "test")
        metrics.describe("latency_seconds", .histogram, "test", buckets: [0.1, 1])
        for index in 0..<5000 {
            metrics.increment("requests_total", [("path", "/x/\(index)")])
            metrics.observe("latency_seconds", [("path", "/x/\(index)")], value: 0.5)
        }
        let text = metrics.exposition()
        #expect(text.components(separatedBy: "\nrequests_total{").count - 1 == MetricsRegistry.maxSeriesPerFamily)
        #expect(text.components(separatedBy: "\nlatency_seconds_count{").count - 1 == MetricsRegistry.maxSeriesPerFamily)
        #expect(text.contains("kumapush_metrics_series_dropped_total 8000"))
        // Series that exist keep counting.
        metrics.increment("requests_total", [("path", "/x/0")])
        #expect(metrics.value("requests_total", [("path", "/x/0")]) == 2)
    }

    @Test func labelValuesAreCutAndEscaped() {
        let metrics = MetricsRegistry()
        metrics.describe("t_total", .counter, "test")
        metrics.increment("t_total", [("v", String(repeating: "é", count: 500) + "\"}\n")])
        let line = metrics.exposition().split(separator: "\n").first { $0.hasPrefix("t_total{") } ?? ""
        #expect(line.utf8.count < MetricsRegistry.maxLabelValueBytes + 30)
        #expect(!line.contains("\n"))
    }
}
