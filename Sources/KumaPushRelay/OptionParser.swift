/// Reads a subcommand's own options (`--reason R`, `--since=7d`, `--dry-run`) from what `Settings.load` left.
struct OptionParser {
    private var arguments: [String]

    init(_ arguments: [String]) { self.arguments = arguments }

    /// Removes and returns the value of `--name VALUE` or `--name=VALUE`, if present.
    mutating func value(_ name: String) throws -> String? {
        for (index, argument) in arguments.enumerated() {
            if argument == name {
                guard index + 1 < arguments.count else { throw UsageError("\(name) needs a value") }
                let value = arguments[index + 1]
                arguments.removeSubrange(index...(index + 1))
                return value
            }
            if argument.hasPrefix(name + "=") {
                arguments.remove(at: index)
                return String(argument.dropFirst(name.count + 1))
            }
        }
        return nil
    }

    /// Removes `--name` and says whether it was there.
    mutating func flag(_ name: String) -> Bool {
        guard let index = arguments.firstIndex(of: name) else { return false }
        arguments.remove(at: index)
        return true
    }

    /// Removes and returns the first argument that is not an option.
    mutating func positional() -> String? {
        guard let index = arguments.firstIndex(where: { !$0.hasPrefix("--") }) else { return nil }
        return arguments.remove(at: index)
    }

    /// Fails on anything not consumed.
    func finish() throws {
        if let extra = arguments.first { throw UsageError("unexpected argument \"\(extra)\"") }
    }
}
