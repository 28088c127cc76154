import Synchronization
import Systemd
import Testing
import Threading

/// systemd's watchdog is fed from the loops' own heartbeats (SPEC §2.3): pings while every loop turns, none while
/// one is wedged, and again once it turns. Checked by the order of events, not by timing.
@Suite struct LoopWatchdogTests {
    enum Event: Equatable {
        case ping
        case wedged([String])
    }

    final class Recorder: Sendable {
        let events = Mutex<[Event]>([])
        let changed = WakeUp()
        func record(_ event: Event) {
            events.withLock { $0.append(event) }
            changed.signal()
        }
        /// Waits (at most 30 s) until `condition` holds for the events so far.
        func wait(until condition: ([Event]) -> Bool) -> Bool {
            let deadline = ContinuousClock.now + .seconds(30)
            while !events.withLock({ condition($0) }) {
                if !changed.wait(until: deadline) { return events.withLock { condition($0) } }
            }
            return true
        }
    }

    @Test func pingsOnlyWhileEveryLoopTurns() {
        let recorder = Recorder()
        let wedgedSince = Mutex<ContinuousClock.Instant?>(nil)
        let delivery = MonitoredLoop(name: "delivery") { wedgedSince.withLock { $0.map { .now - $0 } } ?? .zero }
        let watchdog = LoopWatchdog(
            loops: [MonitoredLoop(name: "writer") { .zero }, delivery], interval: .milliseconds(200),
            ping: { recorder.record(.ping) }, onWedged: { recorder.record(.wedged($0)) })
        watchdog.start()
        defer { watchdog.stop() }
        // The writer always turns; the delivery loop stops turning, then turns again.
        #expect(recorder.wait { events in events.filter { $0 == .ping }.count >= 2 })
        wedgedSince.withLock { $0 = .now - .seconds(3600) }
        #expect(recorder.wait { events in events.filter { $0 == .wedged(["delivery"]) }.count >= 3 })
        let afterFirstWedged = recorder.events.withLock { events in
            Array(events.drop { $0 != .wedged(["delivery"]) })
        }
        #expect(!afterFirstWedged.contains(.ping), "no ping while the delivery loop is wedged")
        wedgedSince.withLock { $0 = nil }
        #expect(recorder.wait { events in events.last == .ping }, "pings again once it turns")
    }
}
