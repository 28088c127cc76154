import Synchronization

/// What this binary is, for `kumapush_build_info{version,schema}` (a gauge of 1, the Prometheus convention): a
/// dashboard joins on it to show which version each process runs, and an alert compares versions across a fleet.
///
/// The version lives in the executable and the schema in Queue, neither of which Common sees, so the executable
/// records them once at start-up, before any command makes a registry; every registry made afterwards exports them.
public enum BuildInfo {
    static let metric = "kumapush_build_info"
    private static let recorded = Mutex<(version: String, schema: Int)?>(nil)

    public static func record(version: String, schema: Int) {
        recorded.withLock { $0 = (version, schema) }
    }

    static func describe(in registry: MetricsRegistry) {
        guard let info = recorded.withLock({ $0 }) else { return }
        registry.describe(metric, .gauge, "Always 1; the relay's version and the database schema version it runs.")
        registry.set(metric, [("version", info.version), ("schema", String(info.schema))], to: 1)
    }
}
