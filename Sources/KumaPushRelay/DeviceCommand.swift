import Common
import Foundation
import Queue

/// `device show ID` and `device delete ID` (SPEC §5): support's view of one device, and an operator's delete.
enum DeviceCommand: Command {
    static let name = "device"
    static let summary = "one device's story for support, or an operator's delete"
    static let help = """
        Usage: kumapush-relay device show ID [--json]
               kumapush-relay device delete ID
               (an ID that begins with -- goes after --: device delete -- --Xy12…)

          show     registered, APNs environment, last success, last error, live jobs, dead letters by reason and
                   the tombstone of a removed device; the token only as a prefix, never a notification's content
          delete   a user's erasure request: the device and every job it has go; its webhook URL answers 410
        """

    /// The tombstone reason an operator's delete leaves (the webhook then answers 410 `device unregistered`).
    static let erasedReason = "DeletedByOperator"

    static func run(settings: Settings, arguments: [String]) throws -> Int32 {
        var options = OptionParser(arguments)
        let json = options.flag("--json")
        guard let action = options.positional(), let id = options.positional() else {
            throw UsageError("device takes show ID or delete ID (an ID that begins with -- goes after --: device show -- ID)")
        }
        try options.finish()
        let store = try openAdminStore(settings)
        let now = SystemClock().nowMillis()
        switch action {
        case "show":
            if let summary = try store.deviceSummary(id: id) {
                print(json ? jsonText(summary) : table(summary, now: now))
                return ExitCode.ok
            }
            if let tombstone = try store.tombstone(deviceID: id) {
                let removed = RFC3339.string(epochMillis: tombstone.removedAt)
                print(
                    json
                        ? "{\"id\":\(JSONText.quoted(id)),\"removed\":{\"reason\":\(JSONText.quoted(tombstone.reason)),\"at\":\(JSONText.quoted(removed))}}"
                        : "device \(id) was removed at \(removed): \(tombstone.reason); its webhook URL answers 410")
                return ExitCode.ok
            }
            printError("no device \(id), and no tombstone of one")
            return ExitCode.runtimeError
        case "delete":
            guard try store.eraseDevice(id: id, reason: erasedReason, now: now) else {
                printError("no device \(id)")
                return ExitCode.runtimeError
            }
            print("deleted device \(id) and its jobs; its webhook URL now answers 410")
            return ExitCode.ok
        default:
            throw UsageError("device takes show ID or delete ID, not \(action)")
        }
    }

    /// The token's first 8 characters: enough to match a user's report, not enough to push to the phone.
    static func tokenPrefix(_ token: String) -> String { String(token.prefix(8)) + "…" }

    static func table(_ summary: DeviceSummary, now: Int64) -> String {
        let device = summary.device
        var rows: [(String, String)] = [
            ("device", device.id), ("token", tokenPrefix(device.token)),
            ("registered", RFC3339.string(epochMillis: device.dateAdded)),
            ("environment", summary.environment ?? "configured (none learnt)"),
            ("down alerts", device.downNotificationLevel.rawValue),
            ("last success", device.lastSuccessfulNotification.map { RFC3339.string(epochMillis: $0) } ?? "never"),
            ("last error", device.lastDeliveryError.isEmpty ? "none" : device.lastDeliveryError),
            ("live jobs", "\(summary.liveJobs)"),
            ("oldest live job", summary.oldestLiveJobAt.map { "\(StatsCommand.humanAge(millis: now - $0)) old" } ?? "none waiting")
        ]
        let dead = summary.deadLettersByReason.sorted { $0.key < $1.key }
        rows.append(("dead letters", dead.isEmpty ? "none" : dead.map { "\($0.value) \($0.key)" }.joined(separator: ", ")))
        let width = rows.map(\.0.count).max() ?? 0
        return rows.map { $0.0.padding(toLength: width + 2, withPad: " ", startingAt: 0) + $0.1 }.joined(separator: "\n")
    }

    static func jsonText(_ summary: DeviceSummary) -> String {
        let device = summary.device
        let reasons = summary.deadLettersByReason.sorted { $0.key < $1.key }.map { "\(JSONText.quoted($0.key)):\($0.value)" }
        let fields = [
            "\"id\":\(JSONText.quoted(device.id))",
            "\"token_prefix\":\(JSONText.quoted(tokenPrefix(device.token)))",
            "\"date_added\":\(JSONText.quoted(RFC3339.string(epochMillis: device.dateAdded)))",
            "\"environment\":\(summary.environment.map(JSONText.quoted) ?? "null")",
            "\"down_notification_level\":\(JSONText.quoted(device.downNotificationLevel.rawValue))",
            "\"last_successful_notification\":\(device.lastSuccessfulNotification.map { JSONText.quoted(RFC3339.string(epochMillis: $0)) } ?? "null")",
            "\"last_delivery_error\":\(JSONText.quoted(device.lastDeliveryError))",
            "\"live_jobs\":\(summary.liveJobs)",
            "\"oldest_live_job\":\(summary.oldestLiveJobAt.map { JSONText.quoted(RFC3339.string(epochMillis: $0)) } ?? "null")",
            "\"dead_letters_by_reason\":{\(reasons.joined(separator: ","))}"
        ]
        return "{" + fields.joined(separator: ",") + "}"
    }
}
