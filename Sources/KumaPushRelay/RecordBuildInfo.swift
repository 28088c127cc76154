import Common
import Queue

/// Hands Common what `kumapush_build_info` reports: this binary's version and the schema its migrations reach.
/// Called once from main, before any command makes a metrics registry.
func recordBuildInfo() {
    BuildInfo.record(version: relayVersion, schema: SQLiteStore.schemaVersion)
}
