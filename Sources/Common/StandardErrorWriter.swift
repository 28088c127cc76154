import Foundation
import Synchronization
import Threading

/// The one thread that writes log lines to standard error, or to another descriptor (issue 13).
///
/// Threads that log only append to a bounded queue under a short lock and return; this thread takes the whole
/// queue and writes it with write(2), holding no lock while it does. So a stalled stderr (a full pipe nobody
/// reads, a frozen terminal) stalls no thread but this one, and a broken one (closed, EPIPE with SIGPIPE ignored,
/// EIO) never crashes the process: lines that cannot be written, or that arrive while `capacity` lines already
/// wait, are dropped and counted. Foundation's `FileHandle.write` traps on any write error, hence write(2).
final class StandardErrorWriter: Sendable {
    static let shared = StandardErrorWriter(descriptor: STDERR_FILENO)

    /// Lines dropped by any writer in this process.
    static let dropped = Atomic<Int>(0)

    /// Lines waiting at most; beyond that new lines are dropped (the oldest are kept: they say how it started).
    static let capacity = 8192

    private struct Queue {
        var lines: [String] = []
        /// The writer thread is writing a batch taken from `lines`.
        var writing = false
    }

    private let descriptor: Int32
    private let queue = Mutex(Queue())
    /// Signalled for every line queued; the writer thread sleeps on it while there is nothing to write.
    private let linesQueued = WakeUp()
    /// Signalled by the writer thread each time it finds nothing left to write; `flush` sleeps on it.
    private let drained = WakeUp()

    init(descriptor: Int32) {
        if descriptor == STDERR_FILENO { Self.keepStandardErrorOpen() }
        self.descriptor = descriptor
        Thread.start(named: "log-writer") { [self] in run() }
        if descriptor == STDERR_FILENO {
            // Lines logged just before exit (e.g. "stopped") still get out, for at most a second.
            atexit { StandardErrorWriter.shared.flush(timeout: 1) }
        }
    }

    /// A process started with stderr closed would hand descriptor 2 to the next socket it opens, and log lines
    /// would then go to a client. Point it at /dev/null instead (lines are then lost, as the operator chose).
    /// Runs when the first process logger is made, before any socket or file is opened.
    private static func keepStandardErrorOpen() {
        guard fcntl(STDERR_FILENO, F_GETFD) == -1, errno == EBADF else { return }
        let null = open("/dev/null", O_WRONLY)
        if null >= 0, null != STDERR_FILENO {
            dup2(null, STDERR_FILENO)
            close(null)
        }
    }

    func enqueue(_ line: String) {
        let accepted = queue.withLock { queue -> Bool in
            guard queue.lines.count < Self.capacity else { return false }
            queue.lines.append(line)
            return true
        }
        guard accepted else {
            Self.dropped.add(1, ordering: .relaxed)
            return
        }
        linesQueued.signal()
    }

    /// Waits until every queued line has been written (or dropped), at most `timeout` seconds. One caller at a
    /// time (the exit handler).
    func flush(timeout: TimeInterval) {
        let deadline = ContinuousClock.now + .seconds(timeout)
        while queue.withLock({ !$0.lines.isEmpty || $0.writing }) {
            if !drained.wait(until: deadline) { return }
        }
    }

    private func run() {
        while true {
            let batch = queue.withLock { queue in
                var taken: [String] = []
                swap(&taken, &queue.lines)
                queue.writing = !taken.isEmpty
                return taken
            }
            if batch.isEmpty {
                // Nothing to write: tell a flush that waits, then sleep until a line arrives.
                drained.signal()
                linesQueued.wait(until: nil)
                continue
            }
            var text = ""
            for line in batch {
                text += line
                text += "\n"
            }
            if !writeAll(Array(text.utf8)) { Self.dropped.add(batch.count, ordering: .relaxed) }
            queue.withLock { $0.writing = false }
        }
    }

    /// Writes every byte, retrying interrupted and partial writes; false when the descriptor refuses them.
    private func writeAll(_ bytes: [UInt8]) -> Bool {
        bytes.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let written = write(descriptor, raw.baseAddress! + offset, raw.count - offset)
                if written > 0 {
                    offset += written
                } else if written < 0 && errno == EINTR {
                    continue
                } else {
                    // EBADF (closed), EPIPE (reader gone), EAGAIN (a non-blocking stderr that is full), EIO, ENOSPC…
                    return false
                }
            }
            return true
        }
    }
}
