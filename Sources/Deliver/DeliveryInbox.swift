import Synchronization
import Threading

/// What other threads hand the delivery thread (APNs' answers, wake-ups, the stop), and the sleep it waits in
/// between rounds.
///
/// A class of its own so that a push's completion can hold it strongly. Holding the engine instead had to be weak
/// (the engine holds the connections that hold the completion): a weak reference formed and loaded on every push,
/// and every later retain and release of the engine taken through its side table (perf, twenty-second session).
final class DeliveryInbox: Sendable {
    /// What arrived since the delivery thread last looked, taken as a whole at the top of each round.
    struct Arrivals: Sendable {
        var answers: [DeliveryEngine.Answer] = []
        var wakeRequested = true
        var stopping = false
    }

    private let arrivals = Mutex(Arrivals())
    /// Signalled with every change to `arrivals`; the delivery thread sleeps on it between rounds.
    private let wakeUp = WakeUp()

    /// From a connection's thread: APNs answered (or the request failed).
    func post(_ answer: DeliveryEngine.Answer) {
        arrivals.withLock { $0.answers.append(answer) }
        wakeUp.signal()
    }

    /// New jobs may be waiting.
    func requestWake() {
        arrivals.withLock { $0.wakeRequested = true }
        wakeUp.signal()
    }

    func requestStop() {
        arrivals.withLock { $0.stopping = true }
        wakeUp.signal()
    }

    /// Everything that arrived, leaving the inbox empty (its answers' capacity kept for the next round).
    func take() -> Arrivals {
        arrivals.withLock { arrivals -> Arrivals in
            defer {
                arrivals.answers.removeAll(keepingCapacity: true)
                arrivals.wakeRequested = false
            }
            return arrivals
        }
    }

    /// Sleeps until something arrives (at once if something did since the last `take`) or `deadline` passes.
    func wait(until deadline: ContinuousClock.Instant) {
        wakeUp.wait(until: deadline)
    }
}
