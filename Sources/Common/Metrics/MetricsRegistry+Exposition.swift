/// The Prometheus text exposition (format 0.0.4) of a `MetricsRegistry`.
///
/// Written piece by piece into one string reserved up front: a scrape of `serve` (about 250 lines) cost about 420 µs
/// of CPU when each line was built by interpolation from arrays of labels joined anew per line, and every family
/// filtered every series. That burst competes with webhooks for the same two cores, and a scrape every 100 ms moved
/// the latency tail by more than issue 14's 10 % on a fast host (docs/performance.md, twenty-first session).
extension MetricsRegistry {
    /// The whole registry as Prometheus text.
    public func exposition() -> String {
        let snapshot = snapshot()
        var values = snapshot.values.mapValues { cell in cell.value.withLock { $0 } }
        for collector in snapshot.collectors {
            for sample in collector() { values[Series(name: sample.name, labels: Self.render(sample.labels))] = sample.value }
        }
        // The registry's own health, in every process that serves metrics.
        values[Series(name: Self.droppedSeriesMetric, labels: [])] = snapshot.droppedUpdates
        values[Series(name: LogSink.droppedLinesMetric, labels: [])] = Double(LogSink.droppedLines)

        // Each family's series, gathered in one pass over all of them.
        var valuesByFamily: [String: [(labels: [String], value: Double)]] = [:]
        for (series, value) in values { valuesByFamily[series.name, default: []].append((series.labels, value)) }
        var histogramsByFamily: [String: [(labels: [String], cell: HistogramCell)]] = [:]
        for (series, cell) in snapshot.histograms { histogramsByFamily[series.name, default: []].append((series.labels, cell)) }

        var out = ""
        out.reserveCapacity(32 * 1024)
        for (name, family) in snapshot.families.sorted(by: { $0.key < $1.key }) {
            out += "# HELP "
            out += name
            out += " "
            out += family.help
            out += "\n# TYPE "
            out += name
            out += " "
            out += family.kind.rawValue
            out += "\n"
            if family.kind == .histogram {
                // Bounds written once per family, not once per series and bucket.
                let familyBounds = Self.bounds(family.buckets)
                for series in (histogramsByFamily[name] ?? []).sorted(by: { $0.labels.lexicographicallyPrecedes($1.labels) }) {
                    let histogram = series.cell.state.withLock { $0 }
                    let bounds = histogram.buckets == family.buckets ? familyBounds : Self.bounds(histogram.buckets)
                    let labels = Self.formatted(series.labels)
                    let open = labels.isEmpty ? "{" : "{" + labels + ","
                    for (index, bound) in bounds.enumerated() {
                        Self.line(&out, name, "_bucket", open + bound + "}", String(histogram.bucketCounts[index]))
                    }
                    Self.line(&out, name, "_bucket", open + "le=\"+Inf\"}", String(histogram.count))
                    Self.line(&out, name, "_sum", Self.braces(labels), Self.number(histogram.sum))
                    Self.line(&out, name, "_count", Self.braces(labels), String(histogram.count))
                }
            } else {
                for series in (valuesByFamily[name] ?? []).sorted(by: { $0.labels.lexicographicallyPrecedes($1.labels) }) {
                    Self.line(&out, name, "", Self.braces(Self.formatted(series.labels)), Self.number(series.value))
                }
            }
        }
        return out
    }

    /// `name` `suffix` `labels` ` ` `value` and a newline, appended in place.
    private static func line(_ out: inout String, _ name: String, _ suffix: String, _ labels: String, _ value: String) {
        out += name
        out += suffix
        out += labels
        out += " "
        out += value
        out += "\n"
    }

    /// `key="value",…` for the exposition, values escaped as the text format requires; empty without labels.
    private static func formatted(_ flat: [String]) -> String {
        var text = ""
        for index in stride(from: 0, to: flat.count - 1, by: 2) {
            if !text.isEmpty { text += "," }
            text += flat[index]
            text += "=\""
            let value = flat[index + 1]
            // Label values are almost always plain: escaped only when they hold one of the three characters.
            if value.utf8.contains(where: { $0 == UInt8(ascii: "\\") || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\n") }) {
                text += value.replacingAll("\\", with: "\\\\").replacingAll("\"", with: "\\\"").replacingAll("\n", with: "\\n")
            } else {
                text += value
            }
            text += "\""
        }
        return text
    }

    private static func braces(_ labels: String) -> String { labels.isEmpty ? "" : "{" + labels + "}" }

    /// `le="0.5"`, … for upper bounds.
    private static func bounds(_ buckets: [Double]) -> [String] { buckets.map { "le=\"\(number($0))\"" } }

    private static func number(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? String(Int64(value)) : String(value)
    }
}
