/// Reads a subcommand's own options (`--reason R`, `--since=7d`, `--dry-run`) from what `Settings.load` left.
struct OptionParser {
    private var arguments: [String]
    /// What follows a `--`: positional whatever it looks like. A device id may begin with `--` (its alphabet has `-`),
    /// and `device delete -- --x…` is then the only way to name it.
    private var operands: [String]

    init(_ arguments: [String]) {
        if let end = arguments.firstIndex(of: "--") {
            self.arguments = Array(arguments[..<end])
            operands = Array(arguments[(end + 1)...])
        } else {
            self.arguments = arguments
            operands = []
        }
    }

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

    /// Removes and returns the first argument that is not an option, then those after `--`.
    mutating func positional() -> String? {
        if let index = arguments.firstIndex(where: { !$0.hasPrefix("--") }) { return arguments.remove(at: index) }
        return operands.isEmpty ? nil : operands.removeFirst()
    }

    /// Fails on anything not consumed.
    func finish() throws {
        if let extra = arguments.first ?? operands.first { throw UsageError("unexpected argument \"\(extra)\"") }
    }
}
