import Common

extension SQLiteStore {
    /// One write transaction (the single writer's): the device's seal, live jobs and fold target, the waiting jobs
    /// by number from the head's, the seal moved. An enqueue folding into one of them runs wholly before it (and the
    /// digest carries the fold) or wholly after it (and finds the job sealed, or, near the cap, left out for it).
    public func carryBacklog(deviceID: String, limit: Int, minimum: Int, deviceCap: Int) throws(StoreError) -> [PendingJob] {
        try write { db in
            guard
                let stored = try db.statement("SELECT digest_sealed_through, live_jobs FROM devices WHERE id = ?")
                    .rows([.text(deviceID)], { (sealed: $0.int64(0), live: $0.int(1)) }).first
            else { return [] }
            let waiting = try Self.pendingJobs(device: deviceID, limit: limit, db)
            guard !waiting.isEmpty else { return [] }
            let device = DigestCarry.Device(
                sealedThrough: stored.sealed, live: stored.live, foldTarget: try Self.newestFoldableJob(device: deviceID, db)?.position)
            let decision = DigestCarry.decide(
                waiting.map { DigestCarry.Waiting(position: $0.seq, reportsOutcome: $0.job.reportsOutcome) }, device: device,
                cap: deviceCap, minimum: minimum)
            if let seal = decision.sealThrough {
                try db.statement("UPDATE devices SET digest_sealed_through = ?1 WHERE id = ?2").run([.integer(seal), .text(deviceID)])
            }
            return waiting.prefix(decision.count).map(\.job)
        }
    }
}
