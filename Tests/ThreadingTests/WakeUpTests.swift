import Foundation
import Synchronization
import Testing
import Threading

@Suite struct WakeUpTests {
    @Test func aSignalSentBeforeTheWaitIsNotLost() {
        let wakeUp = WakeUp()
        wakeUp.signal()
        // A lost signal would sleep until the deadline, and the answer would be false.
        #expect(wakeUp.wait(until: .now + .seconds(10)))
    }

    @Test func severalSignalsCountAsOne() {
        let wakeUp = WakeUp()
        wakeUp.signal()
        wakeUp.signal()
        #expect(wakeUp.wait(until: .now + .seconds(10)))
        #expect(!wakeUp.wait(until: .now + .milliseconds(20)))
    }

    @Test func withoutASignalTheWaitEndsAtItsDeadline() {
        let wakeUp = WakeUp()
        let deadline = ContinuousClock.now + .milliseconds(50)
        #expect(!wakeUp.wait(until: deadline))
        #expect(ContinuousClock.now >= deadline)
    }

    @Test func aSignalFromAnotherThreadWakesTheWaiterEveryTime() {
        let wakeUp = WakeUp()
        let woken = Atomic<Int>(0)
        let stop = Atomic<Bool>(false)
        let done = DispatchSemaphore(value: 0)
        Thread {
            while !stop.load(ordering: .relaxed) {
                if wakeUp.wait(until: .now + .seconds(10)) { woken.add(1, ordering: .relaxed) }
            }
            done.signal()
        }.start()
        // Each round waits until the waiter has taken the previous signal, so every signal has a wait to end: some
        // find the waiter asleep, some find it on its way back to sleep.
        var rounds = 0
        for round in 1...200 {
            wakeUp.signal()
            let deadline = ContinuousClock.now + .seconds(5)
            while woken.load(ordering: .relaxed) < round && ContinuousClock.now < deadline { sched_yield() }
            guard woken.load(ordering: .relaxed) == round else { break }
            rounds = round
        }
        stop.store(true, ordering: .relaxed)
        wakeUp.signal()
        #expect(done.wait(timeout: .now() + 15) == .success)
        #expect(rounds == 200)
    }
}
