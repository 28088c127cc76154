import Foundation
import Queue
import Synchronization

/// State only the delivery thread touches. @unchecked Sendable: every field except `graceDeadline` (a Mutex) is
/// read and written by the delivery thread alone; the engine holds it only to keep it alive.
final class UncheckedLoopState: @unchecked Sendable {
    var inFlight: [Int64: DeliveryEngine.InFlight] = [:]
    /// Send times (ms) per device within the last minute, for DEVICE_BURST.
    private var sends: [String: [Int64]] = [:]
    private var sendsPrunedAt: Int64 = 0

    func recordSend(to device: String, at now: Int64) {
        sends[device, default: []].append(now)
        if now - sendsPrunedAt > 60_000 {
            sendsPrunedAt = now
            sends = sends.compactMapValues { times in
                let recent = times.filter { now - $0 < 60_000 }
                return recent.isEmpty ? nil : recent
            }
        }
    }

    func lastSend(to device: String) -> Int64? { sends[device]?.last }

    func recentSends(to device: String, now: Int64) -> Int {
        sends[device]?.reduce(0) { $0 + (now - $1 < 60_000 ? 1 : 0) } ?? 0
    }
    /// Pushes to send again at once (refused streams, a new provider token, the other APNs environment).
    var resendQueue: [DeliveryEngine.Resend] = []
    var breaker = OutageBreaker()
    /// When a push was last handed to a connection, and when APNs last failed for everyone (an outage-class
    /// answer, a configuration fault, every connection down): the stall detector's two clocks.
    var lastSentAt = ContinuousClock.now
    var lastFailureAt: ContinuousClock.Instant?
    /// When this deliverer last wrote its configuration-fault pause to the store (ms), for the refresh.
    var pauseRecordedAt: Int64 = 0
    /// When the dead-letter budget was last enforced (ms).
    var deadLettersCheckedAt: Int64 = 0
    /// Outcomes the store could not record because the database did not answer (PostgreSQL restarting, failing
    /// over): kept and recorded with the next batch, so pushes APNs already accepted are not sent again once it is
    /// back. If it stays away past LEASE_TIMEOUT, the leases are taken over and the fenced outcomes change nothing.
    var unrecorded: [JobOutcome] = []
    var unrecordedRetryAt = ContinuousClock.now
    var claimDue = true
    var nextRetryAt: Int64?
    /// Last time there was anything to do (for the idle poll interval).
    var lastActivity = ContinuousClock.now
    let graceDeadline = Mutex<ContinuousClock.Instant?>(nil)
}
