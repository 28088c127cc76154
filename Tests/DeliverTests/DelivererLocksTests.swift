import Foundation
import TestSupport
import Testing

@testable import Deliver

/// The lock files that tell a deliverer whether a lease holder has ended (`DelivererLocks`). A process that ended is
/// played by a file nobody locks: the kernel drops a `flock` lock when the process holding it ends.
/// `test_crash_recovery.py` shows the same with real processes killed in new pid namespaces.
@Suite struct DelivererLocksTests {
    @Test func aHeldFileIsAliveAnEndedOneIsGoneAndNoFileSaysNothing() throws {
        let directory = TemporaryDirectory()
        let locks = DelivererLocks(databasePath: directory.path("relay.db"))
        try locks.hold(worker: "host:1:live@node")
        try endedWorker("host:1:gone@node", in: locks)

        #expect(locks.hasEnded("host:1:live@node") == false)
        #expect(locks.hasEnded("host:1:gone@node") == true)
        #expect(locks.hasEnded("host:1:gone@node") == true, "its file stays until its leases are taken back")
        #expect(locks.hasEnded("host:7:older@node") == nil, "a deliverer of an older release has no file")
    }

    /// What goes: the files of ended deliverers whose leases were taken back. What stays: the held ones, and an
    /// ended one whose take-back failed (the next start tries again, still knowing it ended).
    @Test func removingEndedFilesKeepsTheHeldOnesAndThoseNotTakenBack() throws {
        let directory = TemporaryDirectory()
        let locks = DelivererLocks(databasePath: directory.path("relay.db"))
        try locks.hold(worker: "host:1:live@node")
        try locks.hold(worker: "host:1:own@node")
        try endedWorker("host:2:gone@node", in: locks)
        try endedWorker("host:3:failed@node", in: locks)

        locks.removeEnded(keeping: ["host:3:failed@node"], own: "host:1:own@node")
        #expect(try FileManager.default.contentsOfDirectory(atPath: locks.directory).count == 3)
        #expect(locks.hasEnded("host:2:gone@node") == nil, "taken back: its file went")
        #expect(locks.hasEnded("host:3:failed@node") == true)
        #expect(locks.hasEnded("host:1:live@node") == false)
    }

    /// A deliverer that crashed inside `hold` left its file under the temporary name: it goes once it is older than
    /// a starting deliverer's could be, unless someone holds it.
    @Test func anUnfinishedFileOfACrashedStartGoesOnceItIsOld() throws {
        let directory = TemporaryDirectory()
        let locks = DelivererLocks(databasePath: directory.path("relay.db"))
        try locks.hold(worker: "host:1:own@node")
        let crashed = locks.path("host:2:crashed@node") + ".new"
        let holding = locks.path("host:3:holding@node") + ".new"
        let written = Date()
        for file in [crashed, holding] {
            #expect(FileManager.default.createFile(atPath: file, contents: nil))
            try FileManager.default.setAttributes([.modificationDate: written], ofItemAtPath: file)
        }
        let held = open(holding, O_RDWR)
        defer { close(held) }
        #expect(flock(held, LOCK_EX | LOCK_NB) == 0)

        locks.removeEnded(keeping: [], own: "host:1:own@node", now: written.addingTimeInterval(DelivererLocks.unfinishedAge - 1))
        #expect(FileManager.default.fileExists(atPath: crashed), "younger than a start could take: perhaps one in progress")

        locks.removeEnded(keeping: [], own: "host:1:own@node", now: written.addingTimeInterval(DelivererLocks.unfinishedAge + 1))
        #expect(!FileManager.default.fileExists(atPath: crashed))
        #expect(FileManager.default.fileExists(atPath: holding), "locked: its deliverer is between flock and rename")
        #expect(locks.hasEnded("host:1:own@node") == false)
    }

    /// The file of a deliverer that ended: there, and locked by no one.
    private func endedWorker(_ worker: String, in locks: DelivererLocks) throws {
        #expect(FileManager.default.createFile(atPath: locks.path(worker), contents: nil))
    }
}
