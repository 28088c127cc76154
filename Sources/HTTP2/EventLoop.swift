internal import CLinux
import Foundation
import Synchronization
import Threading

/// One thread running an epoll loop. Every socket, TLS connection and HTTP/2 session is owned by exactly one loop
/// and touched only on its thread; other threads hand it work with `execute`.
public final class EventLoop: @unchecked Sendable {
    // @unchecked Sendable: what only the loop thread touches is in `loopThread` (a ThreadConfined, checked on every
    // access); `tasks` is behind a Mutex; the file descriptors are immutable.

    public typealias Task = @Sendable () -> Void
    typealias IOHandler = (UInt32) -> Void

    struct Timer {
        let deadline: ContinuousClock.Instant
        let id: Int
        let action: () -> Void
    }

    private let epoll: Int32
    private let wakeup: Int32
    /// What only the loop thread touches; its thread claims it when it starts.
    struct LoopThreadState {
        var handlers: [Int32: IOHandler] = [:]
        /// Ordered by deadline.
        var timers: [Timer] = []
        var nextTimerID = 0
        /// How far tests moved this loop's clock ahead of the real one (`advanceClock`); zero in production.
        var skipped: Duration = .zero
        /// Run once this turn's events, timers and tasks are done (`atEndOfTurn`).
        var endOfTurn: [() -> Void] = []
    }

    /// Tasks to run; `stopping` once `shutdown` was asked, `ended` once the thread has run its last task.
    private let tasks = Mutex<(queue: [Task], stopping: Bool, ended: Bool)>(([], false, false))
    private let loopThread = ThreadConfined(LoopThreadState(), name: "event loop state")
    private let finished = DispatchSemaphore(value: 0)

    public init(name: String) {
        epoll = epoll_create1(Int32(EPOLL_CLOEXEC))
        wakeup = eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC))
        precondition(epoll >= 0 && wakeup >= 0, "epoll_create1/eventfd failed: \(errno)")
        var event = epoll_event(events: EPOLLIN.rawValue, data: epoll_data_t(fd: wakeup))
        epoll_ctl(epoll, EPOLL_CTL_ADD, wakeup, &event)
        // The thread holds the loop until `run()` returns, and nothing holds the thread: a loop that was shut down
        // is freed (its descriptors closed) once its last owner lets go. Kept, the thread closed a cycle with it.
        Thread.start(named: name) { [self] in run() }
    }

    deinit {
        close(epoll)
        close(wakeup)
    }

    /// Runs `task` on the loop thread, soon. Safe from any thread, including the loop's own. Accepted until the
    /// loop has ended, also while it stops: the tasks it runs last queue their own follow-ups (a closed
    /// connection's release), which must run too, or what they free stays allocated for good. Returns false, the
    /// task dropped, once the loop has ended.
    @discardableResult
    public func execute(_ task: @escaping Task) -> Bool {
        let (accepted, wakeLoop) = tasks.withLock { state -> (Bool, Bool) in
            guard !state.ended else { return (false, false) }
            state.queue.append(task)
            // Only the task that finds the queue empty wakes the loop: one queued before it already did, and the
            // loop takes the whole queue at once.
            return (true, state.queue.count == 1)
        }
        if wakeLoop { signal() }
        return accepted
    }

    /// Stops the loop after the tasks queued (and those they queue); blocks until the thread has ended. Not from the
    /// loop thread.
    public func shutdown() {
        precondition(!inLoop, "EventLoop.shutdown() from its own thread would deadlock")
        let first = tasks.withLock { state -> Bool in
            defer { state.stopping = true }
            return !state.stopping
        }
        guard first else { return }
        signal()
        finished.wait()
    }

    public var inLoop: Bool { loopThread.isOwnedByCurrentThread }

    /// Stops the process unless called on the loop thread (for state kept outside `loopThread` that the loop
    /// thread alone may touch, such as a connection's).
    func preconditionInLoop(_ function: StaticString = #function) {
        loopThread.checkOwner(function)
    }

    // MARK: Loop-thread API

    /// The loop's clock: timers and connections measure time with it, so a test can move it (`advanceClock`).
    var now: ContinuousClock.Instant {
        // Nothing skipped outside tests: no Instant arithmetic, asked several times a request.
        let skipped = loopThread.skipped
        return skipped == .zero ? .now : .now + skipped
    }

    /// Moves this loop's clock ahead by `duration` and runs the timers that became due (tests: a simulated day
    /// in a few seconds). Loop thread only.
    package func advanceClock(by duration: Duration) {
        loopThread.skipped += duration
        runDueTimers()
    }

    /// Runs `action` on the loop once this turn's socket events, timers and tasks are done, before the loop waits
    /// again: work that many of them ask for (writing out what they submitted) done once. Loop thread only.
    func atEndOfTurn(_ action: @escaping () -> Void) {
        loopThread.endOfTurn.append(action)
    }

    /// Timers scheduled and not yet run or cancelled.
    package var pendingTimerCount: Int { loopThread.timers.count }

    /// Watches `fd` for `events` (EPOLLIN/EPOLLOUT bits); `handler` gets the ready bits.
    func register(_ fd: Int32, events: UInt32, handler: @escaping IOHandler) {
        loopThread.handlers[fd] = handler
        var event = epoll_event(events: events, data: epoll_data_t(fd: fd))
        epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &event)
    }

    func modify(_ fd: Int32, events: UInt32) {
        preconditionInLoop()
        var event = epoll_event(events: events, data: epoll_data_t(fd: fd))
        epoll_ctl(epoll, EPOLL_CTL_MOD, fd, &event)
    }

    func unregister(_ fd: Int32) {
        loopThread.handlers[fd] = nil
        epoll_ctl(epoll, EPOLL_CTL_DEL, fd, nil)
    }

    /// Runs `action` on the loop after `delay`. Returns an id for `cancelTimer`.
    @discardableResult
    func schedule(after delay: Duration, _ action: @escaping () -> Void) -> Int {
        let deadline = now + delay
        return loopThread.withValue { state in
            state.nextTimerID += 1
            let timer = Timer(deadline: deadline, id: state.nextTimerID, action: action)
            // Deadlines usually arrive in order: append; otherwise binary-search the place.
            if let last = state.timers.last, last.deadline > timer.deadline {
                var low = 0
                var high = state.timers.count
                while low < high {
                    let middle = (low + high) / 2
                    if state.timers[middle].deadline <= timer.deadline { low = middle + 1 } else { high = middle }
                }
                state.timers.insert(timer, at: low)
            } else {
                state.timers.append(timer)
            }
            return timer.id
        }
    }

    func cancelTimer(_ id: Int) {
        loopThread.withValue { state in
            if let index = state.timers.firstIndex(where: { $0.id == id }) { state.timers.remove(at: index) }
        }
    }

    // MARK: The loop

    private func runDueTimers() {
        let now = self.now
        // The action runs outside the access: it may schedule or cancel timers itself.
        while let first = loopThread.timers.first, first.deadline <= now {
            loopThread.timers.removeFirst()
            first.action()
        }
    }

    private func runEndOfTurn() {
        // An action may ask for another (a write that completes a request which submits the next).
        while !loopThread.endOfTurn.isEmpty {
            let actions = loopThread.withValue { state in
                defer { state.endOfTurn.removeAll(keepingCapacity: true) }
                return state.endOfTurn
            }
            for action in actions { action() }
        }
    }

    private func signal() {
        var one: UInt64 = 1
        _ = write(wakeup, &one, 8)
    }

    private func run() {
        loopThread.claim()
        var events = [epoll_event](repeating: epoll_event(), count: 256)
        while true {
            let timeout: Int32
            if let first = loopThread.timers.first {
                let remaining = first.deadline - now
                timeout =
                    remaining <= .zero
                    ? 0 : Int32(clamping: remaining.components.seconds * 1000 + remaining.components.attoseconds / 1_000_000_000_000_000 + 1)
            } else {
                timeout = -1
            }
            let count = epoll_wait(epoll, &events, Int32(events.count), timeout)
            if count > 0 {
                for index in 0..<Int(count) {
                    let fd = events[index].data.fd
                    if fd == wakeup {
                        var value: UInt64 = 0
                        _ = read(wakeup, &value, 8)
                        continue
                    }
                    loopThread.handlers[fd]?(events[index].events)
                }
            }
            runDueTimers()
            let queue = tasks.withLock { state -> [Task] in
                defer { state.queue.removeAll(keepingCapacity: true) }
                return state.queue
            }
            for task in queue { task() }
            runEndOfTurn()
            // Ended only with nothing queued, in the same lock `execute` takes: a task is either run or refused.
            let ended = tasks.withLock { state -> Bool in
                if state.stopping && state.queue.isEmpty { state.ended = true }
                return state.ended
            }
            if ended { break }
        }
        loopThread.withValue { state in
            state.handlers.removeAll()
            state.timers.removeAll()
        }
        finished.signal()
    }
}
