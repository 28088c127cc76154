import Common

/// Commands whose subsystems land in later issues. They exist so the command line has its final shape; until their
/// issue lands they say so and exit 1 instead of pretending to run.
protocol NotYetBuiltCommand: Command {
    static var issue: String { get }
}

extension NotYetBuiltCommand {
    static var help: String { "Usage: kumapush-relay \(name)\n\nNot built yet: see \(issue)." }

    static func run(settings: Settings, arguments: [String]) throws -> Int32 {
        printError("\(name) is not built yet (\(issue))")
        return ExitCode.runtimeError
    }
}

enum ServeCommand: NotYetBuiltCommand {
    static let name = "serve"
    static let summary = "ingest and deliver in one process (the single-host default)"
    static let issue = "issues #3 and #4"
}

enum DeliverCommand: NotYetBuiltCommand {
    static let name = "deliver"
    static let summary = "the APNs worker pool only"
    static let issue = "issue #4"
}

enum APNsSimCommand: NotYetBuiltCommand {
    static let name = "apns-sim"
    static let summary = "a local APNs simulator for development, demos and benchmarks"
    static let issue = "issue #5"
}

enum HealthcheckCommand: NotYetBuiltCommand {
    static let name = "healthcheck"
    static let summary = "exit 0 when GET /health on the local ingest answers 200"
    static let issue = "issue #8"
}
