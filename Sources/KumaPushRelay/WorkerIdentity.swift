import Common
import Foundation

/// A deliverer's worker id, the name its leases carry: `<host>-<machine>.<pid namespace>-<pid>-<8 hex>`.
///
/// The part before the pid (`prefix`) names the process space: the host name, the machine id and the pid namespace.
/// Within one process space a pid says whether the worker still runs, so a deliverer starting there takes back the
/// leases of a predecessor whose pid is gone (a crash, SIGKILL) at once instead of after `LEASE_TIMEOUT`. The host
/// name alone is not enough: containers of one host may share it with separate pid namespaces, and cloned machines
/// may share a name. Without a machine id (`/etc/machine-id`, absent in many containers) there is no prefix and
/// nothing is taken back early. A reused pid makes a dead worker look alive: its leases then expire as before.
struct WorkerIdentity: Sendable {
    let id: String
    /// Every worker of this process space starts with it; nil when the space cannot be named.
    let prefix: String?

    static func current() -> WorkerIdentity {
        let random = ((try? Crypto.randomBytes(4)) ?? [0, 0, 0, 0]).map { String(format: "%02x", $0) }.joined()
        let host = ProcessInfo.processInfo.hostName
        guard let space = processSpace() else {
            return WorkerIdentity(id: "\(host)-\(getpid())-\(random)", prefix: nil)
        }
        let prefix = "\(host)-\(space)-"
        return WorkerIdentity(id: "\(prefix)\(getpid())-\(random)", prefix: prefix)
    }

    /// The pid of a worker of this process space, or nil when `worker` is not one (another host, an older id form).
    func pid(of worker: String) -> pid_t? {
        guard let prefix, worker.hasPrefix(prefix) else { return nil }
        let parts = worker.dropFirst(prefix.count).split(separator: "-")
        guard parts.count == 2, parts[1].count == 8, parts[1].allSatisfy(\.isHexDigit), let pid = pid_t(parts[0]), pid > 0
        else { return nil }
        return pid
    }

    /// Whether `worker` is of this process space, not this process, and its pid is gone.
    func isDeadPredecessor(_ worker: String) -> Bool {
        guard worker != id, let pid = pid(of: worker), pid != getpid() else { return false }
        // Signal 0 checks existence only; EPERM means the pid exists under another user.
        return kill(pid, 0) != 0 && errno == ESRCH
    }

    /// `<first 12 of /etc/machine-id>.<pid namespace inode>`, or nil.
    private static func processSpace() -> String? {
        guard
            let machine = try? String(contentsOfFile: "/etc/machine-id", encoding: .utf8)
                .trimmingCharacters(in: .whitespacesAndNewlines), machine.count >= 12,
            let namespace = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/ns/pid"),
            let open = namespace.firstIndex(of: "["), let close = namespace.firstIndex(of: "]"), open < close
        else { return nil }
        return "\(machine.prefix(12)).\(namespace[namespace.index(after: open)..<close])"
    }
}
