import Common

extension SQLiteStore {
    /// One write transaction (the single writer's): the seal, the waiting jobs by number from the head's, the seal
    /// moved. An enqueue folding into one of them runs wholly before it (and the digest carries the fold) or wholly
    /// after it (and finds the job sealed).
    public func carryBacklog(deviceID: String, limit: Int, minimum: Int) throws(StoreError) -> [PendingJob] {
        try write { db in
            guard
                let sealed = try db.statement("SELECT digest_sealed_through FROM devices WHERE id = ?")
                    .rows([.text(deviceID)], { $0.int64(0) }).first
            else { return [] }
            let waiting = try Self.pendingJobs(device: deviceID, limit: limit, db)
            let decision = DigestCarry.decide(
                waiting.map { DigestCarry.Waiting(position: $0.seq, reportsOutcome: $0.job.reportsOutcome) }, sealedThrough: sealed,
                minimum: minimum)
            if let seal = decision.sealThrough {
                try db.statement("UPDATE devices SET digest_sealed_through = ?1 WHERE id = ?2").run([.integer(seal), .text(deviceID)])
            }
            return waiting.prefix(decision.count).map(\.job)
        }
    }
}
