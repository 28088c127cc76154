import Foundation

/// Wall-clock time in milliseconds since 1970, the unit every stored timestamp uses. Code that decides by time
/// takes a `WallClock` so tests can move time without sleeping.
public protocol WallClock: Sendable {
    func nowMillis() -> Int64
}

/// The real clock.
public struct SystemClock: WallClock {
    public init() {}
    public func nowMillis() -> Int64 { Int64((Date().timeIntervalSince1970 * 1000).rounded(.down)) }
}
