import Testing

@testable import Queue

/// The enqueue rule both stores apply (SPEC §4: no device holds more than DEVICE_QUEUE_MAX live jobs, Test-shaped
/// webhooks included), without a database.
@Suite struct EnqueuePlanTests {
    let testPayload: [UInt8] = Array(#"{"k":"test","m":"Uptime Kuma testing"}"#.utf8)

    func job(test: Bool, payload: [UInt8]? = nil) -> NewJob {
        NewJob(deviceID: "D", publicID: "new", payload: payload ?? testPayload, reportsOutcome: test)
    }

    @Test func anAlertUnderTheCapIsStoredAndPastItFolds() {
        #expect(EnqueuePlan.decide(job(test: false), device: .init(live: 2), cap: 3) == .store(waits: false))
        #expect(EnqueuePlan.decide(job(test: false), device: .init(live: 3), cap: 3) == .foldIntoTail)
        #expect(EnqueuePlan.decide(job(test: false), device: .init(live: 9), cap: 3) == .foldIntoTail)
    }

    @Test func aTestWaitsOnlyWhenNoOtherWaitsAndTheDeviceIsUnderItsCap() {
        #expect(EnqueuePlan.decide(job(test: true), device: .init(live: 0), cap: 3) == .store(waits: true))
        #expect(EnqueuePlan.decide(job(test: true), device: .init(live: 2), cap: 3) == .store(waits: true))
        #expect(EnqueuePlan.decide(job(test: true), device: .init(live: 3), cap: 3) == .foldIntoTail)
    }

    @Test func theSameTestAgainJoinsTheWaitingOneWhateverTheCount() {
        let waiting = EnqueuePlan.WaitingTest(publicID: "first", payload: testPayload)
        for live in [1, 3, 50] {
            #expect(
                EnqueuePlan.decide(job(test: true), device: .init(live: live, waitingTest: waiting), cap: 3)
                    == .sameAsWaitingTest(publicID: "first"))
        }
    }

    @Test func anotherTestShapedNoticeWhileATestWaitsIsAnAlert() {
        let waiting = EnqueuePlan.WaitingTest(publicID: "first", payload: testPayload)
        let notice = job(test: true, payload: Array(#"{"k":"test","m":"Certificate expires in 7 days"}"#.utf8))
        #expect(EnqueuePlan.decide(notice, device: .init(live: 1, waitingTest: waiting), cap: 3) == .store(waits: false))
        #expect(EnqueuePlan.decide(notice, device: .init(live: 3, waitingTest: waiting), cap: 3) == .foldIntoTail)
    }

    /// The invariant the chaos suite checks end to end: whatever arrives, only `store` adds a live job, and it is
    /// only decided under the cap; at most one stored job waits while a Test waits.
    @Test func nothingIsStoredAtOrPastTheCapAndOneTestWaitsAtMost() {
        let other = job(test: true, payload: Array(#"{"k":"test","m":"other"}"#.utf8))
        var device = EnqueuePlan.Device(live: 0)
        var generator = SystemRandomNumberGenerator()
        for step in 0..<2_000 {
            let arriving = [job(test: false), job(test: true), other].randomElement(using: &generator)!
            switch EnqueuePlan.decide(arriving, device: device, cap: 5) {
            case .store(let waits):
                #expect(device.live < 5)
                #expect(!waits || device.waitingTest == nil)
                device.live += 1
                if waits { device.waitingTest = .init(publicID: "t\(step)", payload: arriving.payload) }
            case .foldIntoTail, .sameAsWaitingTest:
                break
            }
            if step % 7 == 0, device.live > 0 {  // a delivery
                device.live -= 1
                if Bool.random(using: &generator) { device.waitingTest = nil }
            }
            #expect(device.live <= 5)
        }
    }
}
