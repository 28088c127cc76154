import Common
import Foundation

/// The id a deliverer leases jobs under, and how a successor on the same machine knows that a lease holder is a
/// process that is gone (SPEC §4: "a process restarted on the same host takes back its dead predecessor's leases at
/// once", instead of leaving its in-flight pushes for LEASE_TIMEOUT).
///
/// `host:pid:random@node` (host names hold no `:`, base64url no `:` or `@`): `node` names this machine's kernel boot and pid namespace (a hash of
/// /proc/sys/kernel/random/boot_id and /proc/self/ns/pid), so two hosts with one host name, or two containers
/// whose pids overlap, never judge each other's processes. A holder on the same node whose pid no longer exists
/// has crashed: nothing can answer for its leases any more. A pid reused by another process only delays the takeover
/// to LEASE_TIMEOUT, as before.
public struct WorkerIdentity: Sendable, Equatable {
    public let node: String
    public let pid: Int32

    public static let current = WorkerIdentity(node: Self.thisNode(), pid: getpid())

    public init(node: String, pid: Int32) {
        self.node = node
        self.pid = pid
    }

    /// A fresh worker id for this process (the random part tells apart two engines of one process, as tests run).
    public func workerID(host: String = ProcessInfo.processInfo.hostName) -> String {
        let random = Base64URL.encode((try? Crypto.randomBytes(4)) ?? [0])
        return "\(host):\(pid):\(random)@\(node)"
    }

    /// Whether `worker` was a process of this node that no longer exists (never this process itself).
    public func isGonePredecessor(_ worker: String, processExists: (Int32) -> Bool = WorkerIdentity.processExists) -> Bool {
        guard let at = worker.lastIndex(of: "@"), worker[worker.index(after: at)...] == node else { return false }
        let parts = worker[..<at].split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count >= 3, let pid = Int32(parts[parts.count - 2]), pid > 0, pid != self.pid else { return false }
        return !processExists(pid)
    }

    /// kill(pid, 0): ESRCH means no such process; EPERM means one exists that is not ours to signal.
    public static func processExists(_ pid: Int32) -> Bool {
        kill(pid, 0) == 0 || errno == EPERM
    }

    static func thisNode() -> String {
        let boot = (try? String(contentsOfFile: "/proc/sys/kernel/random/boot_id", encoding: .utf8)) ?? ""
        let namespace = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/ns/pid")) ?? ""
        // Without either (not Linux, or /proc hidden), a random node: no lease is ever judged, as before.
        let seed = boot.isEmpty || namespace.isEmpty ? UUID().uuidString : boot + namespace
        return String(Crypto.sha256Hex(seed).prefix(12))
    }
}
