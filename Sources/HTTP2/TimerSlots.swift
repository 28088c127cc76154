/// A connection's timers, one named slot each. Setting a slot replaces (cancels) the timer it held, and a timer
/// that fires empties its slot before it runs, so a connection that lives for weeks holds at most one timer per
/// slot however often they fire — never a list that grows by one every second.
/// Confined to its event loop, like the connection that owns it.
final class TimerSlots<Slot: Hashable & CaseIterable> {
    private let loop: EventLoop
    private var scheduled: [Slot: Int] = [:]

    init(loop: EventLoop) {
        self.loop = loop
    }

    /// Runs `action` after `delay`, replacing whatever `slot` held.
    func set(_ slot: Slot, after delay: Duration, _ action: @escaping () -> Void) {
        cancel(slot)
        scheduled[slot] = loop.schedule(after: delay) { [weak self] in
            self?.scheduled[slot] = nil
            action()
        }
    }

    func cancel(_ slot: Slot) {
        if let id = scheduled.removeValue(forKey: slot) { loop.cancelTimer(id) }
    }

    func cancelAll() {
        for slot in Slot.allCases { cancel(slot) }
    }

    func isSet(_ slot: Slot) -> Bool { scheduled[slot] != nil }

    /// Timers held now (at most `Slot.allCases.count`).
    var count: Int { scheduled.count }
}
