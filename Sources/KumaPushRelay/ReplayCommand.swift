import Common
import Foundation
import Queue

enum ReplayCommand: Command {
    static let name = "replay"
    static let summary = "put dead letters back in the queue"
    static let help = """
        Usage: kumapush-relay replay [--reason R] [--device ID] [--since DURATION] [--dry-run]

          --reason R          only dead letters with this APNs reason (e.g. BadDeviceToken, Expired)
          --device ID         only this device's
          --since DURATION    only those dead-lettered within the last DURATION (e.g. 2h, 7d)
          --dry-run           count what would be replayed, change nothing

        Replayed jobs get a fresh JOB_TTL and keep per-device order behind what is already queued. A dead
        letter whose device already holds DEVICE_QUEUE_MAX live jobs stays where it is (replay again later).
        """

    /// Rows per transaction: small enough that ingest and deliver never wait long for the write lock.
    static let batchSize = 500

    static func run(settings: Settings, arguments: [String]) throws -> Int32 {
        var options = OptionParser(arguments)
        let clock = SystemClock()
        let filter = try DeadLetterOptions.filter(&options, clock: clock)
        let dryRun = options.flag("--dry-run")
        try options.finish()

        let store = try openAdminStore(settings, clock: clock)
        let total = try store.countDeadLetters(filter)
        if dryRun {
            print("\(total) dead letter\(total == 1 ? "" : "s") would be replayed")
            return ExitCode.ok
        }
        let progress = ProgressBar(total: total, label: "replaying")
        var done = 0
        let replay = try store.replayAllDeadLetters(
            filter, pageSize: batchSize, now: { clock.nowMillis() }, ttl: settings.jobTTL, deviceCap: settings.deviceQueueMax,
            afterPage: { page in
                done += page.replayed + page.leftAtCap
                progress.update(min(total, done))
            })
        let (replayed, left) = (replay.replayed, replay.leftAtCap)
        progress.finish()
        print("replayed \(replayed) dead letter\(replayed == 1 ? "" : "s")")
        if left > 0 {
            print("left \(left) dead letter\(left == 1 ? "" : "s") whose device holds DEVICE_QUEUE_MAX live jobs: replay again once it drains")
        }
        return ExitCode.ok
    }
}
