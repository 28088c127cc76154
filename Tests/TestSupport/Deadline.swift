import Foundation

/// A condition that did not hold before its deadline.
public struct TimedOut: Error, CustomStringConvertible {
    public let what: String
    public var description: String { "timed out waiting for \(what)" }
}

/// Polls `condition` until it holds, throwing `TimedOut` after `timeout` (a deadline for an event, not a timing
/// assertion: on a loaded machine the condition only comes later).
public func waitUntil(_ what: String, timeout: Duration = .seconds(30), _ condition: () throws -> Bool) throws {
    let deadline = ContinuousClock.now + timeout
    while try !condition() {
        guard ContinuousClock.now < deadline else { throw TimedOut(what: what) }
        Thread.sleep(forTimeInterval: 0.02)
    }
}
