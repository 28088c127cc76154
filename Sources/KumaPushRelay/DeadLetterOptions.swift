import Common
import Queue

/// The filters `replay` and `dead-letters` share: `--reason R`, `--device ID`, `--since DURATION`.
enum DeadLetterOptions {
    static func filter(_ options: inout OptionParser, clock: some WallClock) throws -> DeadLetterFilter {
        var filter = DeadLetterFilter(reason: try options.value("--reason"), deviceID: try options.value("--device"))
        if let since = try options.value("--since") {
            guard let window = DurationSyntax.parse(since) else { throw UsageError("--since takes a duration such as 2h or 7d") }
            filter.since = clock.nowMillis() - window.wholeMilliseconds
        }
        return filter
    }
}
