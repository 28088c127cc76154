import Common
import Foundation
import Queue

enum StatsCommand: Command {
    static let name = "stats"
    static let summary = "devices, queue depth by state, dead letters by reason, oldest job age"
    static let help = """
        Usage: kumapush-relay stats [--json]

          --json   one JSON object instead of the table
        """

    static func run(settings: Settings, arguments: [String]) throws -> Int32 {
        var options = OptionParser(arguments)
        let json = options.flag("--json")
        try options.finish()
        let stats = try openAdminStore(settings).stats()
        let now = SystemClock().nowMillis()
        print(json ? jsonText(stats, now: now) : table(stats, now: now))
        return ExitCode.ok
    }

    static func table(_ stats: QueueStats, now: Int64) -> String {
        var rows: [(String, String)] = [("devices", "\(stats.devices)"), ("tombstones", "\(stats.tombstones)"), ("jobs", "")]
        for state in JobState.allCases {
            rows.append(("  \(state == .discarded ? "dead letters" : state.rawValue)", "\(stats.jobsByState[state] ?? 0)"))
        }
        if !stats.deadLettersByReason.isEmpty {
            rows.append(("dead letters by reason", ""))
            for (reason, count) in stats.deadLettersByReason.sorted(by: { $0.key < $1.key }) {
                rows.append(("  \(reason.isEmpty ? "(none)" : reason)", "\(count)"))
            }
        }
        let oldest = stats.oldestJobCreatedAt.map { "\(humanAge(millis: now - $0)) (since \(RFC3339.string(epochMillis: $0)))" }
        rows.append(("oldest job", oldest ?? "none waiting"))
        let width = rows.map(\.0.count).max() ?? 0
        return rows.map { $0.1.isEmpty ? $0.0 : $0.0.padding(toLength: width + 2, withPad: " ", startingAt: 0) + $0.1 }
            .joined(separator: "\n")
    }

    static func jsonText(_ stats: QueueStats, now: Int64) -> String {
        let jobs = JobState.allCases.map { "\(JSONText.quoted($0.rawValue)):\(stats.jobsByState[$0] ?? 0)" }.joined(separator: ",")
        let reasons = stats.deadLettersByReason.sorted { $0.key < $1.key }
            .map { "\(JSONText.quoted($0.key)):\($0.value)" }.joined(separator: ",")
        let age = stats.oldestJobCreatedAt.map { String(Double(max(0, now - $0)) / 1000) } ?? "null"
        return "{\"devices\":\(stats.devices),\"tombstones\":\(stats.tombstones),\"jobs\":{\(jobs)},"
            + "\"dead_letters_by_reason\":{\(reasons)},\"oldest_job_age_seconds\":\(age)}"
    }

    /// `3d 4h`, `2h 5m`, `4m 10s`, `12s`.
    static func humanAge(millis: Int64) -> String {
        let seconds = max(0, millis / 1000)
        let parts: [(Int64, String)] = [(seconds / 86_400, "d"), (seconds % 86_400 / 3600, "h"), (seconds % 3600 / 60, "m"), (seconds % 60, "s")]
        let first = parts.firstIndex { $0.0 > 0 } ?? 3
        return parts[first..<min(first + 2, parts.count)].map { "\($0.0)\($0.1)" }.joined(separator: " ")
    }
}
