internal import CSystemd
import Foundation

/// Listening sockets handed over by systemd's socket activation (`LISTEN_FDS`, `LISTEN_PID`: fds 3, 4, …).
///
/// Through libsystemd rather than the protocol written out here: sd_listen_fds checks `LISTEN_PID` against this
/// process, marks the fds close-on-exec and clears the variables so no child inherits them, and sd_is_socket
/// says whether an fd is a listening stream socket — the details a hand-written copy would have to get right.
public enum ListenSockets {
    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    /// The listening stream sockets passed to this process; empty when it was not socket-activated. Clears the
    /// variables. Throws when something was passed that the relay cannot listen on (not a listening TCP socket),
    /// or more than `limit` of them: a unit that got that wrong must fail loudly, not bind a port of its own.
    public static func take(limit: Int = 1) throws -> [Int32] {
        let count = sd_listen_fds(1)
        guard count >= 0 else {
            throw Failure(description: "LISTEN_FDS cannot be used: \(String(cString: strerror(-count)))")
        }
        guard count <= limit else {
            throw Failure(description: "LISTEN_FDS passes \(count) sockets; the relay listens on \(limit)")
        }
        let descriptors = (0..<count).map { SD_LISTEN_FDS_START + $0 }
        for descriptor in descriptors {
            let isStreamListener = sd_is_socket(descriptor, AF_UNSPEC, Int32(SOCK_STREAM.rawValue), 1)
            guard isStreamListener > 0 else {
                throw Failure(description: "LISTEN_FDS: fd \(descriptor) is not a listening stream socket")
            }
        }
        return descriptors
    }
}
