import Common
import Foundation
import Queue
import TestSupport
import Testing

/// The queue as several processes see it: real processes on one database (a SQLite file, a PostgreSQL database),
/// racing and being killed.
@Suite struct MultiProcessQueueTests {
    /// Two processes drain 10,000 jobs of 500 devices: every job is claimed exactly once, by one of them, and a
    /// device's job k+1 is never claimed before job k finished (its claim time is after k's completion began).
    @Test(arguments: StoreKind.allCases) func twoProcessesNeverClaimTheSameJobAndKeepPerDeviceOrder(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let devices = try (1...500).map { try db.device($0) }
        var jobs: [NewJob] = []
        for seq in 0..<20 {
            for device in devices { jobs.append(NewJob(deviceID: device, publicID: UUID().uuidString, payload: Array("\(seq)".utf8))) }
        }
        _ = try db.store.enqueue(jobs, now: SystemClock().nowMillis(), ttl: .seconds(3600))

        let workers = try ["A", "B"].map { try ChildProcess("QueueProbe", ["drain", db.location, "worker-\($0)", "16", "2"]) }
        let outputs = try workers.map { try $0.readToEnd() }
        #expect(outputs.allSatisfy { $0.status == 0 })

        struct Claim {
            let device: String
            let seq: Int
            let claimedAt: UInt64
            let worker: Int
        }
        var claims: [Int64: Claim] = [:]
        var completing: [Int64: UInt64] = [:]
        var duplicates = 0
        for (worker, output) in outputs.enumerated() {
            for line in output.lines {
                let f = line.split(separator: " ")
                if f[0] == "claimed" {
                    if claims[Int64(f[1])!] != nil { duplicates += 1 }
                    claims[Int64(f[1])!] = Claim(device: String(f[2]), seq: Int(f[3])!, claimedAt: UInt64(f[4])!, worker: worker)
                } else if f[0] == "completing" {
                    completing[Int64(f[1])!] = UInt64(f[2])!
                }
            }
        }
        #expect(duplicates == 0)
        #expect(claims.count == 10_000)
        #expect(Set(claims.values.map(\.worker)) == [0, 1], "both processes must have taken part")

        var violations = 0
        for (_, deviceClaims) in Dictionary(grouping: claims, by: { $0.value.device }) {
            let ordered = deviceClaims.sorted { $0.value.seq < $1.value.seq }
            #expect(ordered.map(\.value.seq) == Array(0..<20))
            for (earlier, later) in zip(ordered, ordered.dropFirst()) where later.value.claimedAt <= completing[earlier.key]! {
                violations += 1
            }
        }
        #expect(violations == 0)
        #expect(try db.store.liveJobCount() == 0)
    }

    /// A deliverer learns of jobs another process committed through `changeCounter` (SQLite: data_version;
    /// PostgreSQL: NOTIFY heard on a LISTEN connection, which arrives shortly after the commit returns).
    @Test(arguments: StoreKind.allCases) func jobsCommittedByAnotherConnectionMoveTheChangeCounter(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let device = try db.device(1)
        let deliverer = try kind.open(db.location, now: TestDatabase.t0)
        let before = try deliverer.changeCounter()
        try db.enqueue(device, "a1")
        let deadline = ContinuousClock.now + .seconds(10)
        while try deliverer.changeCounter() == before && ContinuousClock.now < deadline {
            Thread.sleep(forTimeInterval: 0.001)
        }
        #expect(try deliverer.changeCounter() != before)
        #expect(try deliverer.claim(worker: "w", limit: 10, now: TestDatabase.t0, lease: .seconds(60)).map(\.label) == ["a1"])
    }

    /// Work another process makes due reaches a deliverer at once, as new jobs do: retries made due after an outage
    /// (`makeRetryableDue`) and dead letters replayed. On PostgreSQL the statements both stores share are followed by
    /// a NOTIFY (`jobsBecameDue`).
    @Test(arguments: StoreKind.allCases) func retriesMadeDueMoveAnotherConnectionsChangeCounter(_ kind: StoreKind) throws {
        try expectItWakesADeliverer(kind, dueAs: .retry(at: TestDatabase.t0 + 300_000, error: "503")) { store in
            let madeDue = try store.makeRetryableDue(now: TestDatabase.t0 + 10)
            #expect(madeDue == 1)
        }
    }

    @Test(arguments: StoreKind.allCases) func replayedDeadLettersMoveAnotherConnectionsChangeCounter(_ kind: StoreKind) throws {
        try expectItWakesADeliverer(kind, dueAs: .deadLetter(reason: "BadDeviceToken")) { store in
            let replayed = try store.replayDeadLetters(DeadLetterFilter(), limit: 10, now: TestDatabase.t0 + 10, ttl: .seconds(60))
            #expect(replayed == 1)
        }
    }

    /// One job finished as `outcome`; then, with a deliverer of its own listening (opened after those commits, so
    /// none of their wake-ups is counted), `act` must move that deliverer's change counter.
    private func expectItWakesADeliverer(_ kind: StoreKind, dueAs outcome: JobOutcome.Kind, act: (any RelayStore) throws -> Void) throws {
        let db = try TestDatabase(kind)
        try db.enqueue(try db.device(1), "a1")
        let jobs = try db.store.claim(worker: "w", limit: 10, now: TestDatabase.t0, lease: .seconds(60))
        _ = try db.store.finish(jobs.map { JobOutcome($0, kind: outcome) }, worker: "w", now: TestDatabase.t0)
        let deliverer = try kind.open(db.location, now: TestDatabase.t0)
        let connected = ContinuousClock.now + .seconds(10)
        while try deliverer.changeCounter() == 0 && ContinuousClock.now < connected { Thread.sleep(forTimeInterval: 0.001) }
        let before = try deliverer.changeCounter()
        try act(db.store)
        let deadline = ContinuousClock.now + .seconds(10)
        while try deliverer.changeCounter() == before && ContinuousClock.now < deadline {
            Thread.sleep(forTimeInterval: 0.001)
        }
        #expect(try deliverer.changeCounter() != before)
    }

    /// A process killed while holding leases: its jobs stay untouchable until LEASE_TIMEOUT, then are rescued and
    /// claimed again by someone else with the attempt counted.
    @Test(arguments: StoreKind.allCases) func aKilledProcessesLeasesAreRescuedAfterTheLeaseTimeout(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        for seed in 1...5 { try db.enqueue(try db.device(seed), "job\(seed)", now: SystemClock().nowMillis()) }
        let lease: Int64 = 60_000
        let before = SystemClock().nowMillis()
        let holder = try ChildProcess("QueueProbe", ["hold", db.location, "doomed", String(lease), "5"])
        let held = try holder.waitForLine { $0.hasPrefix("held") }
        let after = SystemClock().nowMillis()
        #expect(held.split(separator: " ").count == 6)
        holder.killHard()

        #expect(try db.store.claim(worker: "survivor", limit: 10, now: after, lease: .seconds(60)).isEmpty)
        #expect(try db.store.rescueExpiredLeases(now: before + lease - 1) == 0)
        #expect(try db.store.rescueExpiredLeases(now: after + lease) == 5)
        let rescued = try db.store.claim(worker: "survivor", limit: 10, now: after + lease, lease: .seconds(60))
        #expect(rescued.count == 5)
        #expect(rescued.allSatisfy { $0.attempt == 2 })
    }

    /// A process killed with SIGKILL in the middle of a batch enqueue (inside the open transaction) leaves the
    /// batches it committed whole and nothing of the one it was writing.
    @Test(arguments: StoreKind.allCases) func aProcessKilledMidBatchLeavesWholeBatchesOnly(_ kind: StoreKind) throws {
        let db = try TestDatabase(kind)
        let device = try db.device(1)
        let writer = try ChildProcess("QueueProbe", ["enqueue", db.location, device, "1000"])
        #expect(try writer.readLine() == "committed 1")
        #expect(try writer.readLine() == "committed 2")
        #expect(try writer.readLine() == "mid-batch")
        writer.killHard()

        let reopened = try kind.open(db.location, now: SystemClock().nowMillis())
        #expect(try reopened.liveJobCount() == 2000)
        let batches = Set(try db.liveLabels(device).map { $0.prefix { $0 != "-" } })
        #expect(batches == ["1", "2"])
        if kind == .sqlite {
            #expect(try RawSQLite(path: db.location).query("PRAGMA integrity_check") == [["ok"]])
        }
    }
}
