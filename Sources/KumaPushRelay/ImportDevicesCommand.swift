import Common
import Foundation
import Queue

/// Moves devices from the Go relay's PostgreSQL `devices` table, exported as CSV (`\copy devices TO 'devices.csv'
/// CSV HEADER`) or JSON (`SELECT json_agg(d) FROM devices d`). Ids, tokens, auth-token hashes, levels and dates
/// are kept, so existing webhook URLs and app logins keep working.
enum ImportDevicesCommand: Command {
    static let name = "import-devices"
    static let summary = "import devices exported from the Go relay's PostgreSQL (CSV or JSON)"
    static let help = """
        Usage: kumapush-relay import-devices FILE [--format csv|json] [--dry-run]

        FILE is the Go relay's `devices` table:
          psql … -c "\\copy devices TO 'devices.csv' CSV HEADER"            (csv)
          psql … -At -c "SELECT json_agg(d) FROM devices d" > devices.json  (json)
        Columns: id, device_token, auth_token_hash, last_successful_notification, date_added,
        down_notification_level. Devices whose id or token is already here are skipped; rows that cannot be
        imported (bad token, bad id) are reported and skipped; a level other than normal or time-sensitive is
        imported as normal and its row named. The format defaults to the file's extension.
        """

    static func run(settings: Settings, arguments: [String]) throws -> Int32 {
        var options = OptionParser(arguments)
        let format = try options.value("--format")
        let dryRun = options.flag("--dry-run")
        var rest = options
        guard let path = rest.positional() else { throw UsageError("name the export file") }
        try rest.finish()
        guard let data = FileManager.default.contents(atPath: path) else {
            throw StartupError(description: "cannot read \(path)", exitCode: ExitCode.runtimeError)
        }
        let kind = format ?? (path.lowercased().hasSuffix(".json") ? "json" : "csv")
        let rows: [[String: String]]
        switch kind {
        case "csv": rows = try DeviceExport.csvRows(Array(data))
        case "json": rows = try DeviceExport.jsonRows(Array(data))
        default: throw UsageError("--format takes csv or json")
        }
        // A dry run changes nothing: with no SQLite file yet (a relay not started) it counts against an empty relay
        // instead of creating and migrating one, as opening the store would.
        let store: (any RelayStore)? =
            dryRun && settings.databaseURL == nil && !FileManager.default.fileExists(atPath: settings.databasePath)
            ? nil : try openStore(settings)
        if store == nil { printError("no database at \(settings.databasePath) yet: counted as an empty relay, nothing created") }
        var imported = 0
        var present = 0
        var invalid: [String] = []
        var notes: [String] = []
        // A dry run answers as the import would: a row is skipped when its id or token is in the store or in an
        // earlier row that would be imported (the import's own insert would find that one).
        var dryRunIDs: Set<String> = []
        var dryRunTokens: Set<String> = []
        for (index, row) in rows.enumerated() {
            switch DeviceExport.device(from: row) {
            case .failure(let problem):
                invalid.append("row \(index + 1): \(problem)")
            case .success(let device):
                let added: Bool
                if dryRun {
                    let inFile = dryRunIDs.contains(device.id) || dryRunTokens.contains(device.token)
                    added = try !inFile && !(store?.hasDevice(id: device.id, orToken: device.token) ?? false)
                    if added {
                        dryRunIDs.insert(device.id)
                        dryRunTokens.insert(device.token)
                    }
                } else {
                    guard let store else { preconditionFailure("only a dry run goes without a store") }
                    added = try store.importDevice(device)
                }
                guard added else {
                    present += 1
                    continue
                }
                imported += 1
                if let level = DeviceExport.unknownLevel(in: row) {
                    notes.append(
                        "row \(index + 1): unknown down_notification_level \"\(level)\", \(dryRun ? "would be imported" : "imported") as normal")
                }
            }
        }
        print(
            "\(dryRun ? "would import" : "imported") \(imported) device\(imported == 1 ? "" : "s"), "
                + "\(present) already present, \(invalid.count) invalid")
        for problem in invalid.prefix(20) { printError(problem) }
        for note in notes.prefix(20) { printError(note) }
        return invalid.isEmpty ? ExitCode.ok : ExitCode.runtimeError
    }
}

/// Reading the Go relay's `devices` export.
enum DeviceExport {
    struct Malformed: Error, CustomStringConvertible { let description: String }

    /// A level the Go relay never wrote (it takes only these two): the device is imported at `normal`, and the
    /// operator is told which rows.
    static func unknownLevel(in row: [String: String]) -> String? {
        guard let level = row["down_notification_level"], !level.isEmpty,
            Device.DownNotificationLevel(rawValue: level) == nil
        else { return nil }
        return String(level.prefix(40))
    }

    static func device(from row: [String: String]) -> Result<Device, Malformed> {
        guard let id = row["id"], DeviceID.isWellFormed(id) else { return .failure(Malformed(description: "bad id")) }
        guard let token = row["device_token"].flatMap(DeviceToken.normalized) else { return .failure(Malformed(description: "bad device_token")) }
        let level = Device.DownNotificationLevel(rawValue: row["down_notification_level"] ?? "normal") ?? .normal
        guard let added = timestamp(row["date_added"]) else { return .failure(Malformed(description: "bad date_added")) }
        let last = row["last_successful_notification"].flatMap { $0.isEmpty ? nil : timestamp($0) }
        return .success(
            Device(
                id: id, token: token, authTokenHash: (row["auth_token_hash"] ?? "").lowercased(), dateAdded: added,
                lastSuccessfulNotification: last, downNotificationLevel: level))
    }

    /// PostgreSQL's timestamptz text (`2026-09-20 12:00:00.123456+00`) or ISO 8601 (`2026-09-20T12:00:00+00:00`).
    static func timestamp(_ text: String?) -> Int64? {
        guard var text = text?.trimmingWhitespace(), !text.isEmpty else { return nil }
        text = text.replacingOccurrences(of: " ", with: "T")
        if let sign = text.lastIndex(where: { $0 == "+" || $0 == "-" }), sign > text.index(text.startIndex, offsetBy: 10) {
            let zone = text[text.index(after: sign)...]
            if zone.count == 2 { text += ":00" }
        }
        return RFC3339.parse(text)
    }

    static func jsonRows(_ bytes: [UInt8]) throws -> [[String: String]] {
        guard case .array(let items) = try JSONParser.parse(bytes) else { throw Malformed(description: "expected a JSON array of devices") }
        return items.map { item in
            guard case .object(let members) = item else { return [:] }
            var row: [String: String] = [:]
            for (key, value) in members {
                switch value {
                case .string(let text): row[key] = text
                case .number(let text): row[key] = text
                default: break
                }
            }
            return row
        }
    }

    /// RFC 4180 CSV with a header row.
    static func csvRows(_ bytes: [UInt8]) throws -> [[String: String]] {
        var records: [[String]] = [[]]
        var field: [UInt8] = []
        var quoted = false
        var index = 0
        func endField() {
            records[records.count - 1].append(String(decoding: field, as: UTF8.self))
            field.removeAll()
        }
        while index < bytes.count {
            let byte = bytes[index]
            if quoted {
                if byte == UInt8(ascii: "\"") {
                    if index + 1 < bytes.count, bytes[index + 1] == UInt8(ascii: "\"") {
                        field.append(byte)
                        index += 1
                    } else {
                        quoted = false
                    }
                } else {
                    field.append(byte)
                }
            } else if byte == UInt8(ascii: "\"") {
                quoted = true
            } else if byte == UInt8(ascii: ",") {
                endField()
            } else if byte == 0x0a || byte == 0x0d {
                if byte == 0x0d, index + 1 < bytes.count, bytes[index + 1] == 0x0a { index += 1 }
                endField()
                records.append([])
            } else {
                field.append(byte)
            }
            index += 1
        }
        if !field.isEmpty || !(records.last?.isEmpty ?? true) { endField() }
        records.removeAll { $0.isEmpty || $0 == [""] }
        guard let header = records.first else { throw Malformed(description: "empty file") }
        return records.dropFirst().map { Dictionary(zip(header, $0), uniquingKeysWith: { _, last in last }) }
    }
}
