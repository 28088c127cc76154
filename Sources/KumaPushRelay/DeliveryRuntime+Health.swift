import Deliver
import Ingest
import Queue
import Threading

/// Delivery's `/livez` and `/readyz` on the METRICS_ADDR listener of deliver and serve (SPEC §2.3).
extension DeliveryRuntime {
    /// The delivery loop, for `/livez` and systemd's watchdog.
    var loop: MonitoredLoop { MonitoredLoop(name: "delivery", heartbeat: engine.heartbeat) }

    /// The probes to serve next to `/metrics`. `/readyz` asks the database first (a deliverer without one does
    /// nothing), then the engine: stalled, or paused for a configuration fault.
    func probes(store: any RelayStore, loops: [MonitoredLoop], livenessLimit: Duration) -> [String: MetricsServer.Probe] {
        [
            "/livez": { HealthAnswers.liveness(wedged: MonitoredLoop.wedged(loops, limit: livenessLimit)) },
            "/readyz": { [engine] in
                do {
                    try store.ping()
                } catch {
                    return HealthAnswers.databaseUnavailable
                }
                switch engine.readiness {
                case .ready: return HealthAnswers.ok
                case .stalled: return .error(503, "delivery stalled")
                case .paused(let reason): return .error(503, "paused: \(reason)")
                }
            }
        ]
    }
}
