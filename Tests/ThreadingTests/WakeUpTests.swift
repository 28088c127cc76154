import Foundation
import Synchronization
import Testing
import Threading

@Suite struct WakeUpTests {
    @Test func aSignalSentBeforeTheWaitIsNotLost() {
        let wakeUp = WakeUp()
        wakeUp.signal()
        // A lost signal would sleep the full minute, and the answer would be false.
        #expect(wakeUp.wait(until: .now + .seconds(60)))
    }

    @Test func severalSignalsCountAsOne() {
        let wakeUp = WakeUp()
        wakeUp.signal()
        wakeUp.signal()
        #expect(wakeUp.wait(until: .now + .seconds(60)))
        #expect(!wakeUp.wait(until: .now + .milliseconds(20)))
    }

    @Test func withoutASignalTheWaitEndsAtItsDeadline() {
        let wakeUp = WakeUp()
        let deadline = ContinuousClock.now + .milliseconds(50)
        #expect(!wakeUp.wait(until: deadline))
        #expect(ContinuousClock.now >= deadline)
    }

    @Test func aSignalFromAnotherThreadWakesASleepingWaiter() {
        let wakeUp = WakeUp()
        let woken = Atomic<Int>(0)
        let done = DispatchSemaphore(value: 0)
        Thread {
            // No deadline: only a signal ends these waits.
            for _ in 0..<1000 {
                wakeUp.wait(until: nil)
                woken.add(1, ordering: .relaxed)
            }
            done.signal()
        }.start()
        // Each round waits until the waiter has taken the previous signal, so every signal has a wait to end, and
        // most of them find the waiter asleep.
        for round in 1...1000 {
            wakeUp.signal()
            let roundDeadline = ContinuousClock.now + .seconds(10)
            while woken.load(ordering: .relaxed) < round && ContinuousClock.now < roundDeadline { sched_yield() }
        }
        #expect(done.wait(timeout: .now() + 10) == .success)
        #expect(woken.load(ordering: .relaxed) == 1000)
    }
}
