import Common
import Foundation
import Ingest
import Synchronization
import Systemd
import Threading

/// A long-running command's dealings with systemd (SPEC §2.3, §4 "Restarts and upgrades refuse nothing"): the
/// listening socket it may be handed, READY=1 once migrations are done and the listeners open, WATCHDOG=1 while
/// its loops turn, STOPPING=1 at SIGTERM. Outside systemd every notification is a no-op.
final class ProcessLifecycle: Sendable {
    let notifier = ServiceNotifier()
    /// systemd's `WatchdogSec=` for this process, if on.
    let watchdogInterval: Duration?
    private let logger: Logger
    private let watchdog = Mutex<LoopWatchdog?>(nil)

    init(logger: Logger) {
        self.logger = logger
        watchdogInterval = notifier.watchdogInterval
    }

    /// The listening socket systemd handed over (`LISTEN_FDS`), or nil: then the command binds HOST:PORT.
    static func takeListeningSocket() throws -> Int32? {
        do {
            return try ListenSockets.take().first
        } catch {
            throw ConfigurationError(variable: "LISTEN_FDS", message: "\(error)")
        }
    }

    /// How long a loop may be silent before `/livez` calls it wedged: the watchdog's interval when there is one,
    /// so `/livez` and systemd agree.
    var livenessLimit: Duration { watchdogInterval ?? HealthAnswers.defaultLivenessLimit }

    /// The API listener as a loop: alive when a request arrived in the last half interval, or when a request of its
    /// own (`/livez` over loopback) is answered. An idle server's libmicrohttpd threads give no other sign of life.
    static func httpLoop(_ ingest: IngestService, quietAfter: Duration) -> MonitoredLoop {
        MonitoredLoop(name: "http") {
            let silence = ingest.apiSilence
            guard silence > quietAfter else { return silence }
            let answer = HealthcheckCommand.probe(host: ingest.probeHost, port: ingest.port, path: ingest.livenessPath)
            if case .success = answer { return .zero }
            return silence
        }
    }

    /// READY=1, and the watchdog from now on (systemd arms it once the start-up is complete).
    func ready(loops: [MonitoredLoop], status: String) {
        // READY=1 first: a ping before it would tell systemd about a process it does not yet watch.
        notifier.ready(status: status)
        if let interval = watchdogInterval {
            let feeder = LoopWatchdog(
                loops: loops, interval: interval, ping: { [notifier] in notifier.watchdog() },
                onWedged: { [logger] wedged in
                    logger.error(
                        "a loop made no progress for the whole watchdog interval; systemd's watchdog is no longer fed",
                        ["loops": wedged.joined(separator: ","), "watchdog": String(describing: interval)])
                })
            feeder.start()
            watchdog.withLock { $0 = feeder }
        }
    }

    /// STOPPING=1 and no more watchdog pings: from here systemd watches TimeoutStopSec instead.
    /// `expected`: the longest the stop can take (`SHUTDOWN_DELAY` and each `SHUTDOWN_GRACE` it waits), with a margin
    /// for what follows them.
    func stopping(expected: Duration) {
        // The pings end first, so none follows STOPPING=1.
        watchdog.withLock { $0 }?.stop()
        notifier.stopping(expected: expected + .seconds(5))
    }
}
