internal import CSystemd
import Foundation

/// Tells systemd (`Type=notify`, `NOTIFY_SOCKET`) how the process is doing: READY=1 once migrations are done and the
/// listeners open, STOPPING=1 at SIGTERM, WATCHDOG=1 while its loops make progress (see `LoopWatchdog`). Without
/// `NOTIFY_SOCKET` (not started by systemd) every call does nothing. NOTIFY_SOCKET may name an abstract socket
/// (leading `@`); sd_notify handles that.
public struct ServiceNotifier: Sendable {
    public init() {}

    public func ready(status: String) { send("READY=1\nSTATUS=\(status)") }

    /// `expected`: how long the stop may take at most; systemd's stop timeout (`TimeoutStopSec=`) is extended to it
    /// when it is longer (`EXTEND_TIMEOUT_USEC`), so that a long `SHUTDOWN_DELAY` is not cut short by SIGKILL.
    public func stopping(expected: Duration) {
        let microseconds = expected.components.seconds * 1_000_000 + expected.components.attoseconds / 1_000_000_000_000
        send("STOPPING=1\nSTATUS=stopping\nEXTEND_TIMEOUT_USEC=\(microseconds)")
    }

    public func watchdog() { send("WATCHDOG=1") }

    /// systemd's watchdog interval (`WatchdogSec=`, as `WATCHDOG_USEC`), when it is on and meant for this process
    /// (`WATCHDOG_PID`, if set, is this process): nil otherwise.
    public var watchdogInterval: Duration? {
        var microseconds: UInt64 = 0
        guard sd_watchdog_enabled(0, &microseconds) > 0, microseconds > 0 else { return nil }
        return .microseconds(Int64(clamping: microseconds))
    }

    private func send(_ state: String) {
        // The answer says whether a manager listens; a process nobody watches carries on the same.
        _ = sd_notify(0, state)
    }
}
