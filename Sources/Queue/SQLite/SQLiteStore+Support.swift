import Common

extension SQLiteStore: SupportQueries {
    public func deviceSummary(id: String) throws(StoreError) -> DeviceSummary? {
        try read { db in
            guard
                let (device, environment, live) = try db.statement(
                    "SELECT \(Device.columns), apns_environment, live_jobs FROM devices WHERE id = ?"
                ).rows([.text(id)], { (Device(row: $0), $0.isNull(7) ? nil : $0.text(7), $0.int(8)) }).first
            else { return nil }
            // The head is the device's oldest live job (jobs_one_head_per_device); dead letters by their own index.
            let oldest = try db.statement("SELECT created_at FROM jobs h WHERE h.device_id = ? AND \(Self.isHead("h"))")
                .rows([.text(id)]) { $0.int64(0) }.first
            let reasons = try db.statement(
                "SELECT last_error, count(*) FROM jobs WHERE device_id = ? AND state = 'discarded' GROUP BY last_error"
            ).rows([.text(id)]) { ($0.text(0), $0.int(1)) }
            return DeviceSummary(
                device: device, environment: environment, liveJobs: live, oldestLiveJobAt: oldest,
                deadLettersByReason: Dictionary(reasons, uniquingKeysWith: +))
        }
    }
}
