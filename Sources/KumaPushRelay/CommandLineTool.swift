import Common
import Foundation

/// A subcommand of `kumapush-relay`.
protocol Command {
    static var name: String { get }
    static var summary: String { get }
    /// Usage lines and options, printed by `--help`.
    static var help: String { get }
    /// Runs with settings already read and the command's own arguments. Returns the exit code.
    static func run(settings: Settings, arguments: [String]) throws -> Int32
}

/// A command line that cannot be understood: exit 2 with the message.
struct UsageError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Process exit codes (SPEC §5).
enum ExitCode {
    static let ok: Int32 = 0
    static let runtimeError: Int32 = 1
    static let usage: Int32 = 2
}

enum CommandLineTool {
    static var commands: [any Command.Type] {
        [
            ServeCommand.self, IngestCommand.self, DeliverCommand.self, ReplayCommand.self, StatsCommand.self,
            DeviceCommand.self, DeadLettersCommand.self, MigrateCommand.self, APNsSimCommand.self, HealthcheckCommand.self,
            ImportDevicesCommand.self, MigrateStoreCommand.self, VersionCommand.self
        ]
    }

    static func run(arguments: [String], environment: [String: String]) -> Int32 {
        guard let first = arguments.first, first != "--help", first != "-h", first != "help" else {
            print(overview)
            return arguments.isEmpty ? ExitCode.usage : ExitCode.ok
        }
        guard let command = commands.first(where: { $0.name == first }) else {
            printError("unknown command \"\(first)\"; run kumapush-relay --help")
            return ExitCode.usage
        }
        var rest = Array(arguments.dropFirst())
        if rest.contains("--help") || rest.contains("-h") {
            print("kumapush-relay \(command.name): \(command.summary)\n\n\(command.help)")
            return ExitCode.ok
        }
        do {
            let environment = try EnvironmentFile.apply(arguments: &rest, to: environment)
            let (settings, remaining) = try Settings.load(environment: environment, arguments: rest)
            return try command.run(settings: settings, arguments: remaining)
        } catch let error as ConfigurationError {
            printError("configuration error: \(error)")
            return ConfigurationError.exitCode
        } catch let error as UsageError {
            printError("\(error)\nrun kumapush-relay \(command.name) --help")
            return ExitCode.usage
        } catch let error as StartupError {
            printError(error.description)
            return error.exitCode
        } catch {
            printError("\(error)")
            return ExitCode.runtimeError
        }
    }

    static var overview: String {
        let width = commands.map { $0.name.count }.max() ?? 0
        let lines = commands.map { "  \($0.name.padding(toLength: width + 2, withPad: " ", startingAt: 0))\($0.summary)" }
        return """
            kumapush-relay: carries Uptime Kuma alerts to iPhones through Apple Push Notifications.

            Usage: kumapush-relay <command> [options]

            Commands:
            \(lines.joined(separator: "\n"))

            Every setting is an environment variable (see README) and can be overridden by a flag of the same
            name in lower case with dashes, e.g. DATABASE_PATH → --database-path /var/lib/kumapush/kumapush.db.
            Every command takes --env-file PATH: KEY=VALUE lines, as systemd's EnvironmentFile= (the file wins
            over the environment, flags over both); --env-file - reads them from standard input.
            Run kumapush-relay <command> --help for a command's own options.
            Exit codes: 0 ok, 1 runtime error, 2 usage or configuration error.
            """
    }
}

/// Prints to standard error with the program's name in front.
/// One line on stderr with write(2): a closed or broken stderr loses the line and nothing else (FileHandle's
/// write raises an Objective-C style exception there, which ends the process).
func printError(_ message: String) {
    let line = Array("kumapush-relay: \(message)\n".utf8)
    _ = line.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
}
