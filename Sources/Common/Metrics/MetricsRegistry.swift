import Synchronization

/// Prometheus metrics kept in memory and rendered in the text exposition format (version 0.0.4).
///
/// Counters and histograms are updated on hot paths, so each update takes one short lock. Gauges that describe
/// something owned elsewhere (queue depth, open connections) are `collectors`, asked at scrape time.
///
/// Nothing ever removes a series, so the registry bounds them itself, whatever a caller passes: label values are
/// cut to `maxLabelValueBytes`, and a family takes at most `maxSeriesPerFamily` series; updates of further ones are
/// dropped and counted in `kumapush_metrics_series_dropped_total`. Callers still reduce outside text to fixed sets
/// (methods, routes); this is the backstop (issue 13).
public final class MetricsRegistry: Sendable {
    public enum Kind: String, Sendable { case counter, gauge, histogram }

    struct Family: Sendable {
        let kind: Kind
        let help: String
        let buckets: [Double]
    }

    struct Series: Hashable, Sendable {
        let name: String
        /// key, value, key, value… in the caller's order; escaped and formatted only at scrape time, because
        /// updates happen on every request and scrapes every few seconds.
        let labels: [String]
    }

    struct HistogramState: Sendable {
        /// Its family's upper bounds, as described when the series began (a family is described once, at start-up).
        let buckets: [Double]
        /// Observations in each bucket alone, above the bound before it (Prometheus' buckets are cumulative: the
        /// exposition adds them up). One count per observation, not one per bucket at or above it: the deliverer
        /// observes three histograms a push, and the cumulative loop was about 700 instructions a push.
        var inBucket: [UInt64]
        var sum: Double = 0
        var count: UInt64 = 0

        mutating func record(_ value: Double) {
            if let index = buckets.firstIndex(where: { value <= $0 }) { inBucket[index] += 1 }
            sum += value
            count += 1
        }

        /// Observations at or below each bound, as Prometheus counts them.
        var cumulativeCounts: [UInt64] {
            var total: UInt64 = 0
            return inBucket.map { count in
                total += count
                return total
            }
        }
    }

    /// One histogram series, locked on its own: a `Histogram` handle records into it without the registry's lock or
    /// a hash of the series.
    final class HistogramCell: Sendable {
        let state: Mutex<HistogramState>

        init(buckets: [Double]) {
            state = Mutex(HistogramState(buckets: buckets, inBucket: Array(repeating: 0, count: buckets.count)))
        }
    }

    /// One counter or gauge series, locked on its own (see `HistogramCell`).
    final class ValueCell: Sendable {
        let value = Mutex<Double>(0)
    }

    /// A counter series resolved once, for a hot path (`MetricsRegistry.counter`); as `Histogram`.
    public struct Counter: Sendable {
        let cell: ValueCell?
        let registry: MetricsRegistry

        public func increment(by amount: Double = 1) {
            guard let cell else { return registry.countDroppedUpdate() }
            cell.value.withLock { $0 += amount }
        }
    }

    /// A histogram series resolved once, for a hot path that observes it on every push: one short lock per
    /// observation, no hashing (`MetricsRegistry.histogram`). A series the family's cap refused counts each
    /// observation as dropped, as `observe` does.
    public struct Histogram: Sendable {
        let cell: HistogramCell?
        let registry: MetricsRegistry

        public func observe(_ value: Double) {
            guard let cell else { return registry.countDroppedUpdate() }
            cell.state.withLock { $0.record(value) }
        }
    }

    struct State: Sendable {
        var families: [String: Family] = [:]
        var values: [Series: ValueCell] = [:]
        var histograms: [Series: HistogramCell] = [:]
        var collectors: [@Sendable () -> [(name: String, labels: [(String, String)], value: Double)]] = []
        /// Series per metric name, for the cap.
        var seriesCounts: [String: Int] = [:]
        var droppedUpdates: Double = 0

        /// Whether a new series of `name` may be created; counts it when so, and a dropped update when not (unless
        /// the caller counts its updates itself: a `Histogram` handle made for a refused series).
        mutating func admitSeries(_ name: String, countingDrop: Bool = true) -> Bool {
            let count = seriesCounts[name, default: 0]
            guard count < MetricsRegistry.maxSeriesPerFamily else {
                if countingDrop { droppedUpdates += 1 }
                return false
            }
            seriesCounts[name] = count + 1
            return true
        }
    }

    /// Series one metric family may hold. The relay's own label sets are far smaller (routes × methods × statuses).
    public static let maxSeriesPerFamily = 1000
    /// Longest label value kept, in UTF-8 bytes.
    public static let maxLabelValueBytes = 64
    static let droppedSeriesMetric = "kumapush_metrics_series_dropped_total"

    private let state = Mutex(State())

    public init() {
        describe(Self.droppedSeriesMetric, .counter, "Metric updates dropped because their family reached its series limit.")
        describe(LogSink.droppedLinesMetric, .counter, "Log lines dropped because standard error could not take them.")
        ProcessMetrics.describe(in: self)
        BuildInfo.describe(in: self)
    }

    /// Declares a metric family once (HELP and TYPE lines). Histograms take their upper bucket bounds in the metric's unit (seconds, or a count).
    public func describe(_ name: String, _ kind: Kind, _ help: String, buckets: [Double] = []) {
        state.withLock { $0.families[name] = Family(kind: kind, help: help, buckets: buckets.sorted()) }
    }

    public func increment(_ name: String, _ labels: [(String, String)] = [], by amount: Double = 1) {
        counter(name, labels).increment(by: amount)
    }

    public func set(_ name: String, _ labels: [(String, String)] = [], to value: Double) {
        guard let cell = valueCell(name, labels) else { return countDroppedUpdate() }
        cell.value.withLock { $0 = value }
    }

    /// An update of a series the family's cap refused (`kumapush_metrics_series_dropped_total`).
    func countDroppedUpdate() {
        state.withLock { $0.droppedUpdates += 1 }
    }

    /// The counter `name` with `labels`, made (and counted against the family's cap) the first time.
    public func counter(_ name: String, _ labels: [(String, String)] = []) -> Counter {
        Counter(cell: valueCell(name, labels), registry: self)
    }

    private func valueCell(_ name: String, _ labels: [(String, String)]) -> ValueCell? {
        cell(name, labels, in: \.values) { _ in ValueCell() }
    }

    /// The cell of series `name` with `labels` in `table`, made by `make` the first time; one hash of the series
    /// for an existing one. Nil when the family's cap refuses a new one (the caller counts the dropped update).
    private func cell<Cell: Sendable>(
        _ name: String, _ labels: [(String, String)], in table: WritableKeyPath<State, [Series: Cell]>, make: (State) -> Cell
    ) -> Cell? {
        let series = Series(name: name, labels: Self.render(labels))
        return state.withLock { state -> Cell? in
            if let cell = state[keyPath: table][series] { return cell }
            guard state.admitSeries(name, countingDrop: false) else { return nil }
            let cell = make(state)
            state[keyPath: table][series] = cell
            return cell
        }
    }

    public func observe(_ name: String, _ labels: [(String, String)] = [], value: Double) {
        histogram(name, labels).observe(value)
    }

    /// The series `name` with `labels`, made (and counted against the family's cap) the first time. An existing
    /// series keeps its family's bounds, so finding it hashes once (the series).
    public func histogram(_ name: String, _ labels: [(String, String)] = []) -> Histogram {
        Histogram(cell: cell(name, labels, in: \.histograms) { HistogramCell(buckets: $0.families[name]?.buckets ?? []) }, registry: self)
    }

    /// Adds a function that reports gauge values at scrape time.
    public func collect(_ collector: @escaping @Sendable () -> [(name: String, labels: [(String, String)], value: Double)]) {
        state.withLock { $0.collectors.append(collector) }
    }

    /// The value of a counter or gauge series (tests and the bench read these).
    public func value(_ name: String, _ labels: [(String, String)] = []) -> Double {
        state.withLock { $0.values[Series(name: name, labels: Self.render(labels))] }?.value.withLock { $0 } ?? 0
    }

    /// The registry's state as of now, for the exposition (MetricsRegistry+Exposition.swift).
    func snapshot() -> State { state.withLock { $0 } }

    static func render(_ labels: [(String, String)]) -> [String] {
        var flat: [String] = []
        flat.reserveCapacity(labels.count * 2)
        for (key, value) in labels {
            flat.append(key)
            flat.append(value.utf8.count > maxLabelValueBytes ? cut(value) : value)
        }
        return flat
    }

    /// The longest prefix of whole characters within `maxLabelValueBytes`.
    private static func cut(_ value: String) -> String {
        var bytes = 0
        var end = value.startIndex
        for character in value {
            bytes += character.utf8.count
            if bytes > maxLabelValueBytes { break }
            end = value.index(after: end)
        }
        return String(value[..<end])
    }
}

/// Latency buckets in seconds, from 0.5 ms to an hour. The buckets past 30 s are for outages: jobs that waited
/// out an APNs outage or a paused deliverer land there as the queue drains, where they would all have read as
/// "over 30 s" (SPEC §2.3).
public let latencyBuckets: [Double] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600
]

extension String {
    func replacingAll(_ target: String, with replacement: String) -> String {
        split(separator: target, omittingEmptySubsequences: false).joined(separator: replacement)
    }
}
