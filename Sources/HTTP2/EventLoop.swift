import Foundation
import Synchronization
internal import CLinux

/// One thread running an epoll loop. Every socket, TLS connection and HTTP/2 session is owned by exactly one loop
/// and touched only on its thread; other threads hand it work with `execute`.
public final class EventLoop: @unchecked Sendable {
    // @unchecked Sendable: `handlers`, `timers`, `nextTimerID` and `skipped` are touched only on the loop thread (checked with
    // `preconditionInLoop` in debug builds); `tasks` is behind a Mutex; the file descriptors are immutable.

    public typealias Task = @Sendable () -> Void
    typealias IOHandler = (UInt32) -> Void

    struct Timer {
        let deadline: ContinuousClock.Instant
        let id: Int
        let action: () -> Void
    }

    private let epoll: Int32
    private let wakeup: Int32
    private let tasks = Mutex<(queue: [Task], stopping: Bool)>(([], false))
    private var handlers: [Int32: IOHandler] = [:]
    private var timers: [Timer] = []
    private var cancelledTimers: Set<Int> = []
    private var nextTimerID = 0
    /// How far tests moved this loop's clock ahead of the real one (`advanceClock`); zero in production.
    private var skipped: Duration = .zero
    private var thread: Thread?
    private let threadID = Mutex<pthread_t?>(nil)
    private let finished = DispatchSemaphore(value: 0)

    public init(name: String) {
        epoll = epoll_create1(Int32(EPOLL_CLOEXEC))
        wakeup = eventfd(0, Int32(EFD_NONBLOCK | EFD_CLOEXEC))
        precondition(epoll >= 0 && wakeup >= 0, "epoll_create1/eventfd failed: \(errno)")
        var event = epoll_event(events: EPOLLIN.rawValue, data: epoll_data_t(fd: wakeup))
        epoll_ctl(epoll, EPOLL_CTL_ADD, wakeup, &event)
        let thread = Thread { [self] in run() }
        thread.name = name
        self.thread = thread
        thread.start()
    }

    deinit {
        close(epoll)
        close(wakeup)
    }

    /// Runs `task` on the loop thread, soon. Safe from any thread, including the loop's own.
    public func execute(_ task: @escaping Task) {
        let accepted = tasks.withLock { state -> Bool in
            guard !state.stopping else { return false }
            state.queue.append(task)
            return true
        }
        if accepted { signal() }
    }

    /// Stops the loop after the tasks already queued; blocks until the thread has ended. Not from the loop thread.
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

    public var inLoop: Bool {
        threadID.withLock { $0.map { pthread_equal($0, pthread_self()) != 0 } ?? false }
    }

    func preconditionInLoop(_ function: StaticString = #function) {
        assert(inLoop, "\(function) must run on its event loop")
    }

    // MARK: Loop-thread API

    /// The loop's clock: timers and connections measure time with it, so a test can move it (`advanceClock`).
    var now: ContinuousClock.Instant {
        preconditionInLoop()
        return .now + skipped
    }

    /// Moves this loop's clock ahead by `duration` and runs the timers that became due (tests: a simulated day
    /// in a few seconds). Loop thread only.
    package func advanceClock(by duration: Duration) {
        preconditionInLoop()
        skipped += duration
        runDueTimers()
    }

    /// Timers scheduled and not yet run or cancelled.
    package var pendingTimerCount: Int {
        preconditionInLoop()
        return timers.count
    }

    /// Watches `fd` for `events` (EPOLLIN/EPOLLOUT bits); `handler` gets the ready bits.
    func register(_ fd: Int32, events: UInt32, handler: @escaping IOHandler) {
        preconditionInLoop()
        handlers[fd] = handler
        var event = epoll_event(events: events, data: epoll_data_t(fd: fd))
        epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &event)
    }

    func modify(_ fd: Int32, events: UInt32) {
        preconditionInLoop()
        var event = epoll_event(events: events, data: epoll_data_t(fd: fd))
        epoll_ctl(epoll, EPOLL_CTL_MOD, fd, &event)
    }

    func unregister(_ fd: Int32) {
        preconditionInLoop()
        handlers[fd] = nil
        epoll_ctl(epoll, EPOLL_CTL_DEL, fd, nil)
    }

    /// Runs `action` on the loop after `delay`. Returns an id for `cancelTimer`.
    @discardableResult
    func schedule(after delay: Duration, _ action: @escaping () -> Void) -> Int {
        preconditionInLoop()
        nextTimerID += 1
        let timer = Timer(deadline: now + delay, id: nextTimerID, action: action)
        // Deadlines usually arrive in order: append; otherwise binary-search the place.
        if let last = timers.last, last.deadline > timer.deadline {
            var low = 0, high = timers.count
            while low < high {
                let middle = (low + high) / 2
                if timers[middle].deadline <= timer.deadline { low = middle + 1 } else { high = middle }
            }
            timers.insert(timer, at: low)
        } else {
            timers.append(timer)
        }
        return timer.id
    }

    func cancelTimer(_ id: Int) {
        preconditionInLoop()
        if let index = timers.firstIndex(where: { $0.id == id }) { timers.remove(at: index) }
    }

    // MARK: The loop

    private func runDueTimers() {
        let now = self.now
        while let first = timers.first, first.deadline <= now {
            timers.removeFirst()
            first.action()
        }
    }

    private func signal() {
        var one: UInt64 = 1
        _ = write(wakeup, &one, 8)
    }

    private func run() {
        threadID.withLock { $0 = pthread_self() }
        var events = [epoll_event](repeating: epoll_event(), count: 256)
        while true {
            let timeout: Int32
            if let first = timers.first {
                let remaining = first.deadline - now
                timeout = remaining <= .zero ? 0 : Int32(clamping: remaining.components.seconds * 1000 + remaining.components.attoseconds / 1_000_000_000_000_000 + 1)
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
                    handlers[fd]?(events[index].events)
                }
            }
            runDueTimers()
            let (queue, stopping) = tasks.withLock { state -> ([Task], Bool) in
                defer { state.queue.removeAll(keepingCapacity: true) }
                return (state.queue, state.stopping)
            }
            for task in queue { task() }
            if stopping && tasks.withLock({ $0.queue.isEmpty }) { break }
        }
        handlers.removeAll()
        timers.removeAll()
        finished.signal()
    }
}
