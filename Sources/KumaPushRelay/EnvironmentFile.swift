import Common
import Foundation

/// `--env-file PATH` on every command (SPEC §5): KEY=VALUE lines as systemd's `EnvironmentFile=` reads them, so an
/// operator runs admin commands with the units' own configuration and no secret on the command line (where `ps`
/// would show it).
enum EnvironmentFile {
    /// Removes `--env-file PATH` (or `--env-file=PATH`) from `arguments` and returns `environment` with the file's
    /// settings laid over it: as with systemd, the file wins over the environment, and flags over both.
    static func apply(arguments: inout [String], to environment: [String: String]) throws -> [String: String] {
        var path: String?
        var kept: [String] = []
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            if argument == "--" {
                // The end of options: the rest is the command's (a device id may begin with `--`).
                kept += arguments[index...]
                break
            }
            if argument == "--env-file" {
                guard index + 1 < arguments.count else { throw UsageError("--env-file needs a file") }
                path = arguments[index + 1]
                index += 2
                continue
            }
            if argument.hasPrefix("--env-file=") {
                path = String(argument.dropFirst("--env-file=".count))
            } else {
                kept.append(argument)
            }
            index += 1
        }
        arguments = kept
        guard let path else { return environment }
        let source = path == "-" ? "standard input" : path
        guard let data = contents(of: path), let text = String(data: data, encoding: .utf8) else {
            throw ConfigurationError(variable: "--env-file", message: "cannot read \(source)")
        }
        return environment.merging(try parse(text, path: source)) { _, file in file }
    }

    /// `-` is standard input, read as it was opened: a root shell can hand the units' root-only file to a command
    /// that runs as the relay's user (`runuser -u kumapush -- … --env-file - < /etc/kumapush/kumapush.env`), which
    /// could not open it itself.
    private static func contents(of path: String) -> Data? {
        guard path == "-" else { return FileManager.default.contents(atPath: path) }
        return try? FileHandle.standardInput.readToEnd() ?? Data()
    }

    /// systemd's rules, the ones env files use: blank lines and lines starting with `#` or `;` are skipped; `KEY=VALUE`
    /// with spaces around both trimmed; a value wholly in single or double quotes loses them.
    static func parse(_ text: String, path: String) throws -> [String: String] {
        var settings: [String: String] = [:]
        for (number, rawLine) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = rawLine.trimmingCharacters(in: .whitespaces)
            if line.isEmpty || line.hasPrefix("#") || line.hasPrefix(";") { continue }
            guard let equals = line.firstIndex(of: "=") else {
                throw ConfigurationError(variable: "--env-file", message: "\(path) line \(number + 1): expected KEY=VALUE")
            }
            let key = line[..<equals].trimmingCharacters(in: .whitespaces)
            var value = line[line.index(after: equals)...].trimmingCharacters(in: .whitespaces)
            if value.count >= 2, let first = value.first, first == "\"" || first == "'", value.last == first {
                value = String(value.dropFirst().dropLast())
            }
            guard !key.isEmpty, key.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "_" }) else {
                throw ConfigurationError(variable: "--env-file", message: "\(path) line \(number + 1): not a variable name")
            }
            settings[key] = value
        }
        return settings
    }
}
