import Foundation
import HTTP2
import Queue

/// State only the delivery thread touches: the engine keeps it in a `ThreadConfined` its thread claims, so any
/// other thread touching it stops the process instead of racing.
struct DeliveryLoopState {
    var inFlight: [Int64: DeliveryEngine.InFlight] = [:]
    /// Pushes to send again at once (refused streams, a new provider token, the other APNs environment).
    var resendQueue: [DeliveryEngine.Resend] = []
    /// Connections handed requests this round without waking their loop (`sendDeferringWake`), woken by
    /// `flushSends` once the round's requests are all handed over.
    var connectionsToFlush: [HTTP2ClientConnection] = []
    /// Requests handed over since the last flush.
    var sentSinceFlush = 0
    var breaker: OutageBreaker
    /// When a push was last handed to a connection, and when APNs last failed for everyone (an outage-class
    /// answer, a configuration fault, every connection down): the stall detector's two clocks.
    var lastSentAt = ContinuousClock.now
    var lastFailureAt: ContinuousClock.Instant?
    /// When a claim or a record last failed on the store (PostgreSQL restarting, failing over, its host gone): a
    /// stall then is the database's, and the detector says so instead of blaming APNs.
    var lastDatabaseFailureAt: ContinuousClock.Instant?
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
    /// The last probe's claim found no job: the next probe claims only when a claim is due again (a new job, a
    /// wake-up, a retry coming due, the once-a-second claim), not on every turn of the loop.
    var probeFoundNothing = false
    var nextRetryAt: Int64?
    /// The provider token generation the clock warning was last logged for (once per token, not per push).
    var clockWarnedGeneration: Int?
    /// Last time there was anything to do (for the idle poll interval).
    var lastActivity = ContinuousClock.now
}
