import Foundation
import Testing
import Threading

@Suite struct ThreadConfinedTests {
    struct Counters {
        var count = 0
        var seen: [Int] = []
    }

    /// Runs `body` on a thread of its own and waits for it (at most 10 s).
    static func onOtherThread(_ body: @escaping @Sendable () -> Void) {
        let done = DispatchSemaphore(value: 0)
        Thread {
            body()
            done.signal()
        }.start()
        precondition(done.wait(timeout: .now() + 10) == .success, "the other thread did not finish")
    }

    @Test func theOwnerReadsAndChangesMembersInPlace() {
        let confined = ThreadConfined(Counters(), name: "counters")
        confined.claim()
        confined.count += 2
        confined.seen.append(7)
        confined.withValue { $0.seen.append(8) }
        #expect(confined.count == 2)
        #expect(confined.seen == [7, 8])
        #expect(confined.isOwnedByCurrentThread)
    }

    @Test func onlyTheClaimingThreadOwnsIt() {
        let confined = ThreadConfined(Counters(), name: "counters")
        #expect(!confined.isOwnedByCurrentThread)
        Self.onOtherThread { confined.claim() }
        #expect(!confined.isOwnedByCurrentThread)
    }

    @Test func touchingItFromAnotherThreadStopsTheProcess() async {
        await #expect(processExitsWith: .failure) {
            let confined = ThreadConfined(Counters(), name: "counters")
            ThreadConfinedTests.onOtherThread { confined.claim() }
            confined.count += 1
        }
    }

    @Test func touchingItBeforeAnyThreadClaimedItStopsTheProcess() async {
        await #expect(processExitsWith: .failure) {
            let confined = ThreadConfined(Counters(), name: "counters")
            _ = confined.count
        }
    }

    @Test func aSecondClaimStopsTheProcess() async {
        await #expect(processExitsWith: .failure) {
            let confined = ThreadConfined(Counters(), name: "counters")
            confined.claim()
            ThreadConfinedTests.onOtherThread { confined.claim() }
        }
    }
}
