import Foundation
import Synchronization
import Threading

/// Feeds systemd's watchdog from the process's own loops: every half `WATCHDOG_USEC` it asks each loop how long it
/// has been silent, and sends WATCHDOG=1 only when every one went round within the interval. A wedged loop (a
/// thread stuck in a call that never returns) stops the pings, and systemd restarts the process. The timer only
/// carries the loops' word: it never pings on its own.
public final class LoopWatchdog: Sendable {
    private let loops: [MonitoredLoop]
    private let interval: Duration
    private let ping: @Sendable () -> Void
    private let onWedged: @Sendable ([String]) -> Void
    private let wakeUp = WakeUp()
    private let stopping = Atomic<Bool>(false)
    private let finished = DispatchSemaphore(value: 0)

    /// - Parameters:
    ///   - interval: systemd's `WATCHDOG_USEC`; pings go every half of it.
    ///   - ping: sends WATCHDOG=1 (`ServiceNotifier.watchdog`).
    ///   - onWedged: hears the names of the loops that went silent for the whole interval (for the log), once per
    ///     check that finds them.
    public init(
        loops: [MonitoredLoop], interval: Duration, ping: @escaping @Sendable () -> Void,
        onWedged: @escaping @Sendable ([String]) -> Void
    ) {
        self.loops = loops
        self.interval = interval
        self.ping = ping
        self.onWedged = onWedged
    }

    public func start() {
        Thread.start(named: "watchdog") { [self] in run() }
    }

    /// Stops the pings (at shutdown, after STOPPING=1: systemd then watches the stop timeout instead).
    public func stop() {
        guard !stopping.exchange(true, ordering: .relaxed) else { return }
        wakeUp.signal()
        finished.wait()
    }

    private func run() {
        while !stopping.load(ordering: .relaxed) {
            let wedged = MonitoredLoop.wedged(loops, limit: interval)
            if wedged.isEmpty { ping() } else { onWedged(wedged) }
            wakeUp.wait(until: .now + interval / 2)
        }
        finished.signal()
    }
}
