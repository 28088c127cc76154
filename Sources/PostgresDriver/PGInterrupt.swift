import Foundation

/// A self-pipe that ends a wait on a connection's socket (`PGConnection.waitForInput`) or on nothing
/// (`wait(until:)`) from another thread: raised once, for good — it stops the thread that waits, which must not go
/// on sleeping through a backoff or in poll(2) while its owner shuts down.
package final class PGInterrupt: Sendable {
    private let readEnd: Int32
    private let writeEnd: Int32

    /// Throws when the process cannot make a pipe (out of file descriptors: an environment's failure, not a bug),
    /// with `errno`'s reason read straight after the call.
    package init() throws(PGError) {
        var ends: [Int32] = [-1, -1]
        guard pipe(&ends) == 0 else {
            throw PGError(sqlstate: "", message: "cannot make a pipe: \(String(cString: strerror(errno)))")
        }
        for end in ends {
            _ = fcntl(end, F_SETFD, FD_CLOEXEC)
            _ = fcntl(end, F_SETFL, fcntl(end, F_GETFL) | O_NONBLOCK)
        }
        (readEnd, writeEnd) = (ends[0], ends[1])
    }

    deinit {
        close(readEnd)
        close(writeEnd)
    }

    /// Ends every wait under way and every later one at once. From any thread; raising it again changes nothing.
    package func raise() {
        var byte: UInt8 = 1
        // Non-blocking: a pipe too full to take the byte is already readable, which is all a waiter looks at.
        _ = write(writeEnd, &byte, 1)
    }

    /// Whether it was raised. Never read from the pipe: the byte stays, so the interrupt stays raised.
    package var isRaised: Bool { Self.poll([readEnd], timeout: .zero) }

    /// Sleeps until raised or until `deadline`. Returns whether it was raised.
    @discardableResult
    package func wait(until deadline: ContinuousClock.Instant) -> Bool {
        Self.poll([readEnd], timeout: max(.zero, deadline - .now)) || isRaised
    }

    /// Sleeps until `socket` has something to read (or failed), the interrupt is raised, or `timeout` passes.
    package func wait(for socket: Int32, timeout: Duration) -> PGInputWait {
        var descriptors = [pollfd(fd: socket, events: Int16(POLLIN), revents: 0), pollfd(fd: readEnd, events: Int16(POLLIN), revents: 0)]
        let ready = Glibc.poll(&descriptors, nfds_t(descriptors.count), Self.milliseconds(timeout))
        if ready > 0 && descriptors[1].revents != 0 { return .interrupted }
        // POLLHUP/POLLERR count as input: the next read on the connection reports the failure.
        if ready > 0 && descriptors[0].revents != 0 { return .input }
        return .timedOut
    }

    /// poll(2) for input on `descriptors`; true when one is ready. EINTR counts as nothing ready (callers loop).
    private static func poll(_ descriptors: [Int32], timeout: Duration) -> Bool {
        var entries = descriptors.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
        return Glibc.poll(&entries, nfds_t(entries.count), milliseconds(timeout)) > 0
    }

    /// poll(2)'s timeout: whole milliseconds, rounded up so that a wait never ends before its deadline.
    private static func milliseconds(_ duration: Duration) -> Int32 {
        let (seconds, attoseconds) = duration.components
        let total = seconds * 1000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000
        return Int32(clamping: max(0, total))
    }
}

/// How a wait for input on a connection's socket ended.
package enum PGInputWait {
    /// The server sent something, or the socket failed: read it (`PGConnection.drainNotifications`).
    case input
    /// The interrupt was raised.
    case interrupted
    case timedOut
}
