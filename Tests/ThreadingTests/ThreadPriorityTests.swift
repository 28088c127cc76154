import Foundation
import Synchronization
import Testing
import Threading

/// A thread lowers its own CPU priority and no other's (the WAL checkpointer relies on it: the writer and the HTTP
/// threads keep theirs).
@Suite struct ThreadPriorityTests {
    @Test(.enabled(if: (Thread.currentNice ?? 0) <= 16, "from nice 17 up the lowered value is capped at 19"))
    func loweringAThreadsPriorityLeavesTheThreadThatStartedItAsItWas() {
        let before = Thread.currentNice
        let lowered = Mutex<Int32?>(nil)
        let done = DispatchSemaphore(value: 0)
        Thread.start(named: "nice-probe") {
            Thread.lowerCurrentPriority(by: 3)
            lowered.withLock { $0 = Thread.currentNice }
            done.signal()
        }
        done.wait()
        #expect(before != nil)
        #expect(lowered.withLock { $0 } == (before ?? 0) + 3)
        #expect(Thread.currentNice == before)
    }
}
