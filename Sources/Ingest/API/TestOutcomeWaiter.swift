import Common
import Dispatch
import Queue
import Synchronization

/// Holds the Test-button requests that wait for APNs' answer (SPEC §2.2) and answers them all from one poll: every
/// 10 ms while any waits, one query for all their outcomes and one for a configuration-fault pause, on one timer
/// thread — not a query per waiting request per tick on the reader every other read shares (issue 13). At most
/// `capacity` wait at once; past that a Test request is answered at once (`answerAtOnce`: 202, as SPEC §2.2 allows,
/// or 502 while paused).
final class TestOutcomeWaiter: Sendable {
    struct Waiting: Sendable {
        let responder: any HTTPResponder
        let deadline: ContinuousClock.Instant
    }

    private let store: any RelayStore
    private let clock: any WallClock
    private let capacity: Int
    private let waiting = Mutex<[String: Waiting]>([:])
    private let timer = Mutex<(any DispatchSourceTimer)?>(nil)
    private let queue = DispatchQueue(label: "ingest.test-outcomes")
    static let interval = DispatchTimeInterval.milliseconds(10)
    /// A paused deliverer refreshes its record every few seconds; one older than this is from a process that died.
    static let pauseFreshness: Int64 = 30_000

    init(store: any RelayStore, clock: any WallClock, capacity: Int = 1000) {
        self.store = store
        self.clock = clock
        self.capacity = capacity
    }

    var count: Int { waiting.withLock { $0.count } }

    /// Waits for the outcome of the job `publicID` until `deadline`; false (and nothing held) when full.
    func wait(for publicID: String, until deadline: ContinuousClock.Instant, responder: any HTTPResponder) -> Bool {
        let admitted = waiting.withLock { waiting -> Bool in
            guard waiting.count < capacity else { return false }
            waiting[publicID] = Waiting(responder: responder, deadline: deadline)
            return true
        }
        if admitted { startPolling() }
        return admitted
    }

    private func startPolling() {
        timer.withLock { timer in
            guard timer == nil else { return }
            let source = DispatchSource.makeTimerSource(queue: queue)
            source.schedule(deadline: .now() + Self.interval, repeating: Self.interval)
            source.setEventHandler { [weak self] in self?.poll() }
            source.resume()
            timer = source
        }
    }

    private func poll() {
        let ids = waiting.withLock { Array($0.keys) }
        guard !ids.isEmpty else { return stopPollingIfIdle() }
        let outcomes = (try? store.reportedOutcomes(publicIDs: ids)) ?? [:]
        let pause = outcomes.count < ids.count ? try? store.currentPause(since: clock.nowMillis() - Self.pauseFreshness) : nil
        let now = ContinuousClock.now
        let answers = waiting.withLock { waiting -> [(Waiting, HTTPResponse)] in
            var answers: [(Waiting, HTTPResponse)] = []
            for id in ids {
                guard let entry = waiting[id] else { continue }
                let answer: HTTPResponse?
                if let outcome = outcomes[id] {
                    answer = Self.response(for: outcome)
                } else if let pause {
                    answer = .error(502, "relay cannot deliver: \(pause) (configuration)")
                } else {
                    answer = now >= entry.deadline ? WebhookEndpoint.queued(id) : nil
                }
                if let answer {
                    waiting[id] = nil
                    answers.append((entry, answer))
                }
            }
            return answers
        }
        for (entry, response) in answers { entry.responder.respond(response) }
    }

    private func stopPollingIfIdle() {
        timer.withLock { timer in
            guard waiting.withLock({ $0.isEmpty }) else { return }
            timer?.cancel()
            timer = nil
        }
    }

    /// The answer to a Test request that is not held for its outcome (it joined the device's waiting Test job, was
    /// folded into its digest at DEVICE_QUEUE_MAX, or found the waiter full), at once: 502 while delivery is paused
    /// by a configuration fault (the push cannot arrive: SPEC §2.2, a Test button never says "sent" then), else
    /// `otherwise`. Reads the store: call it off the writer thread.
    func answerAtOnce(otherwise answer: HTTPResponse) -> HTTPResponse {
        if let pause = try? store.currentPause(since: clock.nowMillis() - Self.pauseFreshness) {
            return .error(502, "relay cannot deliver: \(pause) (configuration)")
        }
        return answer
    }

    /// `answerAtOnce` given to `responder` from another thread: the writer thread, which calls this, must not wait on
    /// the store's read.
    func respondAtOnce(_ responder: any HTTPResponder, otherwise answer: HTTPResponse) {
        DispatchQueue.global().async { [self] in responder.respond(answerAtOnce(otherwise: answer)) }
    }

    /// 200 delivered, 410 unregistered, 502 rejected by APNs or given up by the relay.
    static func response(for outcome: ReportedOutcome) -> HTTPResponse {
        switch outcome.kind {
        case .delivered: return .json(200, "{\"status\":\"delivered\"}")
        case .unregistered: return .error(410, "device unregistered")
        case .rejected: return .error(502, "apns rejected: \(outcome.reason)")
        case .failed: return .error(502, "not delivered: \(outcome.reason)")
        }
    }
}
