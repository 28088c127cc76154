/// A setting that cannot be used. Start-up stops with exit code 2 and this message, which always names
/// the variable so the operator knows what to fix.
public struct ConfigurationError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The environment variable (or the flag's variable) at fault, e.g. `PORT`.
    public let variable: String
    public let message: String

    public init(variable: String, message: String) {
        self.variable = variable
        self.message = message
    }

    public var description: String { "\(variable): \(message)" }

    /// The process exit code for configuration and usage errors (SPEC §5).
    public static let exitCode: Int32 = 2
}
