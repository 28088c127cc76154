import Common
import Foundation
import Queue

/// `dead-letters list` and `dead-letters purge` (SPEC §5): what failed, for whom, why, when, after how many
/// attempts — never the content.
enum DeadLettersCommand: Command {
    static let name = "dead-letters"
    static let summary = "list or purge dead letters (never their content)"
    static let help = """
        Usage: kumapush-relay dead-letters list [--reason R] [--device ID] [--since DURATION] [--limit N] [--json]
               kumapush-relay dead-letters purge [--reason R] [--device ID] [--since DURATION] [--dry-run]

          --reason R          only dead letters with this reason (e.g. BadDeviceToken, Expired)
          --device ID         only this device's
          --since DURATION    only those dead-lettered within the last DURATION (e.g. 2h, 7d)
          --limit N           list at most N, oldest first (default 100); past it, stderr says how many more match
          --dry-run           purge: count what would be deleted, change nothing

        `replay` puts dead letters back in the queue instead.
        """

    static func run(settings: Settings, arguments: [String]) throws -> Int32 {
        var options = OptionParser(arguments)
        let clock = SystemClock()
        let filter = try DeadLetterOptions.filter(&options, clock: clock)
        let limitText = try options.value("--limit")
        guard let limit = Int(limitText ?? "100"), limit > 0 else { throw UsageError("--limit takes a positive whole number") }
        let json = options.flag("--json")
        let dryRun = options.flag("--dry-run")
        guard let action = options.positional() else { throw UsageError("dead-letters takes list or purge") }
        try options.finish()
        let store = try openAdminStore(settings, clock: clock)
        switch action {
        case "list":
            let letters = try store.listDeadLetters(filter, limit: limit)
            print(json ? jsonText(letters) : table(letters))
            // Oldest first: past the limit, the newest are the ones left out, so say so (on stderr, outside the JSON).
            if letters.count == limit, case let count = try store.countDeadLetters(filter), count > limit {
                printError("\(count - limit) more match, newer: raise --limit or narrow with --since, --reason or --device")
            }
        case "purge":
            if dryRun {
                let count = try store.countDeadLetters(filter)
                print("\(count) dead letter\(count == 1 ? "" : "s") would be deleted")
            } else {
                let count = try store.purgeDeadLetters(filter)
                print("deleted \(count) dead letter\(count == 1 ? "" : "s")")
            }
        default:
            throw UsageError("dead-letters takes list or purge, not \(action)")
        }
        return ExitCode.ok
    }

    static func table(_ letters: [DeadLetter]) -> String {
        guard !letters.isEmpty else { return "no dead letters" }
        let header = ["dead since", "device", "reason", "attempts", "accepted", "job"]
        let rows =
            [header]
            + letters.map {
                [
                    RFC3339.string(epochMillis: $0.deadAt), $0.deviceID, $0.reason.isEmpty ? "(none)" : $0.reason, "\($0.attempts)",
                    RFC3339.string(epochMillis: $0.acceptedAt), $0.publicID
                ]
            }
        let widths = header.indices.map { column in rows.map { $0[column].count }.max() ?? 0 }
        return rows.map { row in
            row.indices.map { row[$0].padding(toLength: widths[$0] + 2, withPad: " ", startingAt: 0) }.joined()
                .trimmingCharacters(in: .whitespaces)
        }.joined(separator: "\n")
    }

    static func jsonText(_ letters: [DeadLetter]) -> String {
        let items = letters.map {
            "{\"job\":\(JSONText.quoted($0.publicID)),\"device\":\(JSONText.quoted($0.deviceID)),\"reason\":\(JSONText.quoted($0.reason)),"
                + "\"attempts\":\($0.attempts),\"accepted_at\":\(JSONText.quoted(RFC3339.string(epochMillis: $0.acceptedAt))),"
                + "\"dead_at\":\(JSONText.quoted(RFC3339.string(epochMillis: $0.deadAt)))}"
        }
        return "[" + items.joined(separator: ",") + "]"
    }
}
