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

    /// A label value is written as the text format requires: backslash, double quote and newline escaped, anything
    /// else as it is (the exposition skips the escaping pass for values without them).
    @Test func labelValuesAreEscapedOnlyWhereTheTextFormatAsks() {
        let metrics = MetricsRegistry()
        metrics.describe("seen_total", .counter, "test")
        metrics.describe("took_seconds", .histogram, "test", buckets: [1])
        metrics.increment("seen_total", [("reason", "say \"hi\"\\now\nbye")])
        metrics.increment("seen_total", [("reason", "plain, with = and { }")])
        metrics.observe("took_seconds", [("reason", "a\"b")], value: 0.5)
        let text = metrics.exposition()
        #expect(text.contains(#"seen_total{reason="say \"hi\"\\now\nbye"} 1"#))
        #expect(text.contains(#"seen_total{reason="plain, with = and { }"} 1"#))
        #expect(text.contains(#"took_seconds_bucket{reason="a\"b",le="1"} 1"#))
        #expect(text.contains(#"took_seconds_count{reason="a\"b"} 1"#))
    }

    /// Updates of an existing series are made in place; each must still land in its buckets, sum and count.
    @Test func aHistogramAndACounterAccumulateEveryUpdate() {
        let metrics = MetricsRegistry()
        metrics.describe("wait_seconds", .histogram, "test", buckets: [0.1, 1])
        metrics.describe("done_total", .counter, "test")
        for value in [0.05, 0.5, 2.0] {
            metrics.observe("wait_seconds", [("route", "a")], value: value)
            metrics.increment("done_total", [("route", "a")], by: 2)
        }
        let text = metrics.exposition()
        #expect(text.contains(#"wait_seconds_bucket{route="a",le="0.1"} 1"#))
        #expect(text.contains(#"wait_seconds_bucket{route="a",le="1"} 2"#))
        #expect(text.contains(#"wait_seconds_bucket{route="a",le="+Inf"} 3"#))
        #expect(text.contains(#"wait_seconds_sum{route="a"} 2.55"#) && text.contains(#"wait_seconds_count{route="a"} 3"#))
        #expect(metrics.value("done_total", [("route", "a")]) == 6)
    }

    /// Counts are written digit by digit into the scrape's bytes: every digit, in order, zero included.
    @Test func countsOfSeveralDigitsAndZeroAreWrittenWhole() {
        let metrics = MetricsRegistry()
        metrics.describe("wait_seconds", .histogram, "test", buckets: [0.001, 1])
        for _ in 0..<1_203 { metrics.observe("wait_seconds", value: 0.5) }
        let text = metrics.exposition()
        #expect(text.contains("wait_seconds_bucket{le=\"0.001\"} 0\n"))
        #expect(text.contains("wait_seconds_bucket{le=\"1\"} 1203\n"))
        #expect(text.contains("wait_seconds_bucket{le=\"+Inf\"} 1203\n") && text.contains("wait_seconds_count 1203\n"))
        #expect(text.contains("wait_seconds_sum 601.5\n"))
    }

    /// A handle (`histogram(_:_:)`, resolved once by the deliverer for its per-push histograms) records into the same
    /// series as `observe` by name; one made for a series past the family's cap counts every observation as dropped.
    @Test func aHistogramHandleRecordsIntoItsSeriesAndOnePastTheCapCountsDrops() {
        let metrics = MetricsRegistry()
        metrics.describe("wait_seconds", .histogram, "test", buckets: [0.1, 1])
        let handle = metrics.histogram("wait_seconds", [("route", "a")])
        handle.observe(0.05)
        metrics.observe("wait_seconds", [("route", "a")], value: 0.5)
        handle.observe(2)
        var text = metrics.exposition()
        #expect(text.contains(#"wait_seconds_bucket{route="a",le="0.1"} 1"#) && text.contains(#"wait_seconds_count{route="a"} 3"#))
        for index in 1..<MetricsRegistry.maxSeriesPerFamily { metrics.observe("wait_seconds", [("route", "\(index)")], value: 0) }
        let refused = metrics.histogram("wait_seconds", [("route", "one too many")])
        refused.observe(0.5)
        refused.observe(0.5)
        text = metrics.exposition()
        #expect(text.contains("kumapush_metrics_series_dropped_total 2"), "one per observation, none for making the handle")
        #expect(!text.contains("one too many"))
    }

    /// A counter handle (the deliverer's `kumapush_deliveries_total` of an accepted push) adds to the series that
    /// `increment` and `value` name; one past the cap counts its updates as dropped.
    @Test func aCounterHandleAddsToItsSeriesAndOnePastTheCapCountsDrops() {
        let metrics = MetricsRegistry()
        metrics.describe("done_total", .counter, "test")
        let handle = metrics.counter("done_total", [("outcome", "delivered")])
        handle.increment()
        metrics.increment("done_total", [("outcome", "delivered")], by: 2)
        handle.increment(by: 3)
        #expect(metrics.value("done_total", [("outcome", "delivered")]) == 6)
        #expect(metrics.exposition().contains(#"done_total{outcome="delivered"} 6"#))
        for index in 1..<MetricsRegistry.maxSeriesPerFamily { metrics.increment("done_total", [("outcome", "\(index)")]) }
        let refused = metrics.counter("done_total", [("outcome", "one too many")])
        refused.increment()
        metrics.set("done_total", [("outcome", "another")], to: 5)
        let text = metrics.exposition()
        #expect(text.contains("kumapush_metrics_series_dropped_total 2") && !text.contains("one too many"))
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
