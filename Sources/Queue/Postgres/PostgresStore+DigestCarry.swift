import Common

extension PostgresStore {
    /// One transaction that locks the device row first, as enqueue does before it reads a tail to fold into: the read
    /// after the lock sees every fold committed before it, and an enqueue after it waits for the seal's commit and
    /// finds the jobs sealed. (One statement would not do: under READ COMMITTED it reads the jobs as of its start,
    /// before a fold whose transaction held the lock it then waits for.) BEGIN and the lock travel with the read,
    /// the seal with the COMMIT: two round trips.
    public func carryBacklog(deviceID: String, limit: Int, minimum: Int, deviceCap: Int) throws(StoreError) -> [PendingJob] {
        guard limit > 0 else { return [] }
        return try write { db in
            Self.lockDevices([deviceID], db)
            // The device's seal, live jobs and fold target (the newest waiting alert: the job enqueue's tail read
            // finds) beside each waiting job; no row when none waits.
            let waiting = try db.rows(
                """
                SELECT d.digest_sealed_through, d.live_jobs, f.id,
                       j.id, j.payload, j.created_at, j.reports_outcome, j.folded, j.badge, j.expires_at
                FROM devices d
                CROSS JOIN LATERAL (
                    SELECT max(id) AS id FROM jobs WHERE device_id = d.id AND state = 'pending' AND NOT reports_outcome) AS f
                CROSS JOIN LATERAL (
                    SELECT id, payload, created_at, reports_outcome, folded, badge, expires_at FROM jobs
                    WHERE device_id = d.id AND state = 'pending' ORDER BY id LIMIT $2::bigint) AS j
                WHERE d.id = $1::text ORDER BY j.id
                """, [.text(deviceID), .integer(Int64(limit))]
            ) {
                (
                    device: DigestCarry.Device(sealedThrough: $0.int64(0), live: $0.int(1), foldTarget: $0.isNull(2) ? nil : $0.int64(2)),
                    job: PendingJob(
                        id: $0.int64(3), payload: $0.bytes(4), createdAt: $0.int64(5), reportsOutcome: $0.bool(6),
                        folded: $0.isNull(7) ? FoldedAlerts() : FoldedAlerts(encoded: $0.bytes(7)),
                        badge: $0.isNull(8) ? nil : $0.int(8), expiresAt: $0.int64(9))
                )
            }
            guard let device = waiting.first?.device else { return [] }
            let decision = DigestCarry.decide(
                waiting.map { DigestCarry.Waiting(position: $0.job.id, reportsOutcome: $0.job.reportsOutcome) }, device: device,
                cap: deviceCap, minimum: minimum)
            if let seal = decision.sealThrough {
                db.runDeferred(
                    "UPDATE devices SET digest_sealed_through = $2::bigint WHERE id = $1::text", [.text(deviceID), .integer(seal)])
            }
            return waiting.prefix(decision.count).map(\.job)
        }
    }
}
