import Common

/// The admin commands' reads both stores run as written (`SharedQueries`).
extension SharedQueries {
    public func deviceSummary(id: String) throws(StoreError) -> DeviceSummary? {
        try read { db in
            guard
                let (device, environment, live) = try db.query(
                    "SELECT \(Device.columns), apns_environment, live_jobs FROM devices WHERE id = $1::text", [.text(id)],
                    { (Device(row: $0), $0.optionalText(7), $0.int(8)) }
                ).first
            else { return nil }
            // The head is the device's oldest live job (jobs_one_head_per_device); dead letters by their own index
            // (SQLite: jobs_dead_by_device; PostgreSQL: jobs_by_device).
            let oldest = try db.query("SELECT created_at FROM jobs h WHERE h.device_id = $1::text AND \(Self.isHead("h"))", [.text(id)]) {
                $0.int64(0)
            }.first
            let reasons = try db.query(
                "SELECT last_error, count(*) FROM jobs WHERE device_id = $1::text AND state = 'discarded' GROUP BY last_error", [.text(id)]
            ) { ($0.text(0), $0.int(1)) }
            return DeviceSummary(
                device: device, environment: environment, liveJobs: live, oldestLiveJobAt: oldest,
                deadLettersByReason: Dictionary(reasons, uniquingKeysWith: +))
        }
    }
}
