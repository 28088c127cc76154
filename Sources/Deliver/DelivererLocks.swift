import Common
import Foundation

/// One lock file per deliverer beside a SQLite database, held with `flock` for as long as the process runs: the kernel
/// drops the lock when the process ends, however it ends. So a successor knows that a lease holder is gone even when
/// the pid tells it nothing: a container restarted by Docker runs its deliverer as PID 1 of a new pid namespace every
/// time, and `WorkerIdentity` never judges a holder of another namespace, or one with its own pid (SPEC §4: "a
/// process restarted on the same host takes back its dead predecessor's leases at once"). Every process on one SQLite
/// file shares its file system, so the files are seen by all of them, whatever namespace each runs in.
///
/// A file appears already locked (written under a temporary name, locked, then renamed into place), so one found
/// unlocked belongs to a process that has ended. Its name is a hash of the worker id: the id holds the host name.
/// A file stays until its deliverer's leases are taken back (`removeEnded`): a holder not taken back is tried again at
/// the next start, still knowing it ended.
public struct DelivererLocks: Sendable {
    public let directory: String

    /// Beside the database: `kumapush.db` → `kumapush.db-deliverers/`.
    public init(databasePath: String) {
        directory = databasePath + "-deliverers"
    }

    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    /// Creates `worker`'s file, locked, and keeps it locked for the rest of the process's life (the descriptor is
    /// never closed).
    public func hold(worker: String) throws(Failure) {
        if mkdir(directory, 0o700) != 0, errno != EEXIST { throw failure("cannot create") }
        let temporary = path(worker) + ".new"
        let descriptor = open(temporary, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw failure("cannot create a file in") }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0, rename(temporary, path(worker)) == 0 else {
            let error = failure("cannot lock a file in")
            close(descriptor)
            unlink(temporary)
            throw error
        }
    }

    /// Removes the files of deliverers that have ended, but for those of `kept` (lease holders not taken back: one whose
    /// take-back failed, or that ended after it was judged alive; a later start tries again) and this process's own
    /// (`own`), which it never opens twice (on a file system that emulates `flock` with POSIX locks, closing a second
    /// descriptor would drop its own lock).
    ///
    /// A `.new` file is one whose deliverer ended between creating and renaming it (`hold`). It goes once no one
    /// holds it and it is older than `unfinishedAge`: a deliverer starting now holds its own for microseconds, unlocked
    /// only between `open` and `flock`.
    public func removeEnded(keeping kept: [String], own: String, now: Date = Date()) {
        let keptNames = Set((kept + [own]).map(name))
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [] where !keptNames.contains(entry) {
            let file = directory + "/" + entry
            if entry.hasSuffix(".new") {
                guard let modified = modification(of: file), now.timeIntervalSince(modified) > Self.unfinishedAge else { continue }
            }
            if hasEnded(file: file) == true { unlink(file) }
        }
    }

    /// How old an unlocked `.new` file must be to be taken for a crashed deliverer's.
    static let unfinishedAge: TimeInterval = 60

    private func modification(of file: String) -> Date? {
        (try? FileManager.default.attributesOfItem(atPath: file))?[.modificationDate] as? Date
    }

    /// Whether `worker` held a file here and has ended; nil when it has no file here (a deliverer of an older
    /// release, or one that could not create its file) or the file cannot be checked. The file stays until
    /// `removeEnded`, after its leases are taken back.
    public func hasEnded(_ worker: String) -> Bool? {
        hasEnded(file: path(worker))
    }

    /// Takes the lock for a moment: only a file no process holds can be locked. Held means `EWOULDBLOCK`; any other
    /// failure says nothing.
    private func hasEnded(file: String) -> Bool? {
        let descriptor = open(file, O_RDWR | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        if flock(descriptor, LOCK_EX | LOCK_NB) == 0 { return true }
        return errno == EWOULDBLOCK ? false : nil
    }

    func path(_ worker: String) -> String { directory + "/" + name(worker) }

    private func name(_ worker: String) -> String { String(Crypto.sha256Hex(worker).prefix(32)) }

    private func failure(_ what: String) -> Failure {
        Failure(description: "\(what) \(directory): \(String(cString: strerror(errno)))")
    }
}
