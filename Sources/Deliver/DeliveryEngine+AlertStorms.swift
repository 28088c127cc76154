import Common
import Queue

/// Alert storms (SPEC §3 "Alert storms"): a device over DEVICE_BURST gets at most one push per digest window,
/// and that push carries what waits behind it.
extension DeliveryEngine {
    /// When a device over its burst had a push less than `digestWindow` ago: the time its next push may go, so
    /// this job waits for the alerts still arriving and they leave together.
    func digestWindowEnd(for job: ClaimedJob, now: Int64) -> Int64? {
        guard let burst = configuration.deviceBurst, !job.reportsOutcome, job.recentPushes >= burst,
            let last = job.lastPushAt
        else { return nil }
        let end = last + configuration.digestWindow.wholeMilliseconds
        return now < end ? end : nil
    }

    /// Alert storms (SPEC §3): when the device has had more than DEVICE_BURST pushes sent or waiting within a
    /// minute, the jobs waiting behind this head (oldest first, up to a Test-button job) go out with it as one digest,
    /// sealed by the store so that no alert is folded into them while it is in flight, and near DEVICE_QUEUE_MAX
    /// without the newest, into which ingest folds meanwhile (`DigestCarry`). A device with
    /// no push in the last minute is never merged, so a first alert always goes out alone and at once.
    func stormBacklog(of job: ClaimedJob, now: Int64) -> [PendingJob] {
        guard stormBacklogReadsTheStore(for: job), let burst = configuration.deviceBurst else { return [] }
        // Counted in the database by every deliverer (a process of its own would see only its share).
        let recent = job.recentPushes
        // Pushes sent and waiting, this head included, past the burst: `recent + waiting + 1 > burst`.
        let minimum = burst - recent
        // A look first: `carryBacklog` is a write that locks the device (it seals), and every push to a device with
        // a push in the last minute comes here, storm or not. Only a device with enough jobs waiting pays for it;
        // jobs arriving after this look wait for the next push, as they would after the sealed read.
        let needed = max(minimum, 1)
        guard let waiting = try? store.pendingJobs(deviceID: job.deviceID, limit: needed), waiting.count >= needed else { return [] }
        return
            (try? store.carryBacklog(
                deviceID: job.deviceID, limit: configuration.maximumMerged, minimum: minimum, deviceCap: configuration.deviceQueueMax)) ?? []
    }

    /// Whether `stormBacklog` asks the store anything for `job` (a device with a push in the last minute, under a
    /// DEVICE_BURST): the only case in which building its push can wait on the database.
    func stormBacklogReadsTheStore(for job: ClaimedJob) -> Bool {
        configuration.deviceBurst != nil && job.recentPushes > 0
    }
}
