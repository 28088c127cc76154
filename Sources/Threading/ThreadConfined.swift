import Foundation
import Synchronization

/// A value only one thread may touch, checked on every access: touched from any other thread, the process stops
/// with a message naming the value, instead of racing silently. The check is one atomic load and a `pthread_self`.
///
/// The owner is the thread that calls `claim()`, usually the first thing the thread that runs a loop does; until
/// then nobody may touch the value. Reads and writes go through `@dynamicMemberLookup` (`state.inFlight[id] = x`
/// works in place, without copying the member), or through `withValue` for several steps at once.
@dynamicMemberLookup
public final class ThreadConfined<Value>: @unchecked Sendable {
    // @unchecked Sendable: `value` is read and written only by the owner thread, which every accessor checks
    // first; `owner` (a pthread_t, 0 while unclaimed) is atomic.
    //
    // The accessors are @inlinable (and so the storage @usableFromInline) so that the caller's module can
    // specialize them for its own state, and the optimizer can turn a key path to a stored member into a plain
    // field access, instead of a generic call into this module per access: the delivery loop makes tens of them
    // per APNs answer.
    @usableFromInline var value: Value
    @usableFromInline let owner = Atomic<UInt>(0)
    @usableFromInline let name: StaticString

    /// `name` is what a violation reports, e.g. "delivery loop state".
    public init(_ value: Value, name: StaticString) {
        self.value = value
        self.name = name
    }

    /// Makes the calling thread the owner. Once only: a value does not change threads.
    public func claim() {
        // pthread_t is an unsigned long on Linux (glibc), never 0 for a running thread.
        let (claimed, _) = owner.compareExchange(expected: 0, desired: pthread_self(), ordering: .relaxed)
        precondition(claimed, "\(name) was already claimed by another thread")
    }

    /// Whether the calling thread is the owner.
    @inlinable
    public var isOwnedByCurrentThread: Bool {
        let current = owner.load(ordering: .relaxed)
        return current != 0 && pthread_equal(current, pthread_self()) != 0
    }

    /// Stops the process unless the calling thread is the owner.
    @inlinable
    public func checkOwner(_ function: StaticString = #function) {
        precondition(isOwnedByCurrentThread, "\(name) touched off its thread (in \(function))")
    }

    @inlinable
    public subscript<Member>(dynamicMember member: WritableKeyPath<Value, Member>) -> Member {
        get {
            checkOwner()
            return value[keyPath: member]
        }
        // `_modify` rather than `set`: a mutation of a member (appending to an array in it) happens in place
        // instead of copying the member out and back.
        _modify {
            checkOwner()
            yield &value[keyPath: member]
        }
    }

    /// Runs `body` with the value (owner thread only).
    @inlinable
    public func withValue<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        checkOwner()
        return try body(&value)
    }
}
