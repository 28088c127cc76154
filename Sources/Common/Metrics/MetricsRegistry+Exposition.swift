/// The Prometheus text exposition (format 0.0.4) of a `MetricsRegistry`.
///
/// Written piece by piece into one byte buffer reserved up front: a scrape of `serve` (about 250 lines) cost about 420 µs
/// of CPU when each line was built by interpolation from arrays of labels joined anew per line, and every family
/// filtered every series. That burst competes with webhooks for the same two cores, and a scrape every 100 ms moved
/// the latency tail by more than issue 14's 10 % on a fast host (docs/performance.md, twenty-first session).
extension MetricsRegistry {
    /// The whole registry as Prometheus text.
    public func exposition() -> String { String(decoding: expositionBytes(), as: UTF8.self) }

    /// The whole registry as Prometheus text, in the bytes a scrape's answer carries.
    public func expositionBytes() -> [UInt8] {
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

        var out = ExpositionText()
        out.bytes.reserveCapacity(32 * 1024)
        for (name, family) in snapshot.families.sorted(by: { $0.key < $1.key }) {
            out.write("# HELP ", name, " ")
            out.write(family.help, "\n# TYPE ", name)
            out.write(" ", family.kind.rawValue, "\n")
            if family.kind == .histogram {
                // Bounds written once per family, not once per series and bucket.
                let familyBounds = Self.bounds(family.buckets)
                for series in (histogramsByFamily[name] ?? []).sorted(by: { $0.labels.lexicographicallyPrecedes($1.labels) }) {
                    let histogram = series.cell.state.withLock { $0 }
                    let bounds = histogram.buckets == family.buckets ? familyBounds : Self.bounds(histogram.buckets)
                    let labels = Self.formatted(series.labels)
                    let open = labels.isEmpty ? "{" : "{" + labels + ","
                    for (bound, count) in zip(bounds, histogram.cumulativeCounts) {
                        out.write(name, "_bucket", open)
                        out.write(bound, "} ")
                        out.write(count)
                    }
                    out.write(name, "_bucket", open)
                    out.write("le=\"+Inf\"} ")
                    out.write(histogram.count)
                    out.write(name, "_sum", Self.braces(labels))
                    out.write(" ")
                    out.write(histogram.sum)
                    out.write(name, "_count", Self.braces(labels))
                    out.write(" ")
                    out.write(histogram.count)
                }
            } else {
                for series in (valuesByFamily[name] ?? []).sorted(by: { $0.labels.lexicographicallyPrecedes($1.labels) }) {
                    out.write(name, Self.braces(Self.formatted(series.labels)), " ")
                    out.write(series.value)
                }
            }
        }
        return out.bytes
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

    fileprivate static func number(_ value: Double) -> String {
        value == value.rounded() && abs(value) < 1e15 ? String(Int64(value)) : String(value)
    }
}

/// The exposition's bytes, appended in place: a scrape writes about 250 lines, and appending to a `String` cost more
/// than the bytes themselves (growth and ASCII checks on every append; a twenty-third session profile put `String`
/// appends at a quarter of a scrape), and the answer needed a copy into bytes after.
struct ExpositionText {
    var bytes: [UInt8] = []

    /// Up to three pieces of a line (not variadic: that would allocate an array for every call).
    mutating func write(_ first: String, _ second: String = "", _ third: String = "") {
        bytes.append(contentsOf: first.utf8)
        bytes.append(contentsOf: second.utf8)
        bytes.append(contentsOf: third.utf8)
    }

    /// A count and the line's end, its digits written without a `String` in between.
    mutating func write(_ count: UInt64) {
        let start = bytes.count
        var value = count
        repeat {
            bytes.append(UInt8(ascii: "0") + UInt8(value % 10))
            value /= 10
        } while value > 0
        bytes[start...].reverse()
        bytes.append(UInt8(ascii: "\n"))
    }

    /// A sample's value and the line's end.
    mutating func write(_ value: Double) {
        bytes.append(contentsOf: MetricsRegistry.number(value).utf8)
        bytes.append(UInt8(ascii: "\n"))
    }
}
