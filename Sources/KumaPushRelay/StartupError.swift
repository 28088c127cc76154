import Common
import Queue

/// A failure while opening what a command needs, with the exit code it deserves: 2 for something the operator must
/// fix in the configuration or the files (a foreign or newer database), 1 for a runtime condition.
struct StartupError: Error, CustomStringConvertible {
    let description: String
    let exitCode: Int32
}

extension StartupError {
    /// Maps a failure to open the database named by DATABASE_PATH or DATABASE_URL.
    static func openingDatabase(_ settings: Settings, _ error: StoreError) -> StartupError {
        let variable = settings.databaseURL == nil ? "DATABASE_PATH (\(settings.databasePath))" : "DATABASE_URL"
        switch error.code {
        case .notADatabase, .newerSchema:
            return StartupError(description: "configuration error: \(variable): \(error.message)", exitCode: ExitCode.usage)
        default:
            return StartupError(
                description: "cannot open the database at \(variable): \(error.message)",
                exitCode: ExitCode.runtimeError)
        }
    }
}
