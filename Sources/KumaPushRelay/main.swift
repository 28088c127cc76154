import Foundation

// kumapush-relay: argument parsing and subcommands only. Everything else lives in the library modules.
recordBuildInfo()
let status = CommandLineTool.run(
    arguments: Array(CommandLine.arguments.dropFirst()),
    environment: ProcessInfo.processInfo.environment)
exit(status)
