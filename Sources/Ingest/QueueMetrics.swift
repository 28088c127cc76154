import Common
import Queue

/// The cluster-wide queue figures a scrape reports (SPEC §2.3): depth by state, devices, the oldest queued job's age
/// and dead letters by reason, all from one `stats()` read on the store's own stats connection (never the one that
/// answers the app's device calls).
enum QueueMetrics {
    static func describe(_ metrics: MetricsRegistry, store: any RelayStore, clock: any WallClock) {
        metrics.describe("kumapush_queue_jobs", .gauge, "Jobs in the queue by state (discarded = dead letters).")
        metrics.describe("kumapush_devices", .gauge, "Registered devices.")
        metrics.describe(
            "kumapush_queue_oldest_job_age_seconds", .gauge,
            "Age of the oldest job not yet delivered or dead-lettered (0 when none waits).")
        metrics.describe("kumapush_dead_letters", .gauge, "Dead letters kept, by reason.")
        metrics.collect {
            guard let stats = try? store.stats() else { return [] }
            var samples = JobState.allCases.map {
                (name: "kumapush_queue_jobs", labels: [("state", $0.rawValue)], value: Double(stats.jobsByState[$0] ?? 0))
            }
            samples.append((name: "kumapush_devices", labels: [], value: Double(stats.devices)))
            let age = stats.oldestJobCreatedAt.map { Double(max(0, clock.nowMillis() - $0)) / 1000 } ?? 0
            samples.append((name: "kumapush_queue_oldest_job_age_seconds", labels: [], value: age))
            for (reason, count) in stats.deadLettersByReason.sorted(by: { $0.key < $1.key }) {
                samples.append((name: "kumapush_dead_letters", labels: [("reason", reason.isEmpty ? "none" : reason)], value: Double(count)))
            }
            return samples
        }
    }
}
