import Common

extension PostgresStore: SupportQueries {
    public func deviceSummary(id: String) throws(StoreError) -> DeviceSummary? {
        try read { db in
            guard
                let (device, environment, live) = try db.rows(
                    "SELECT \(Device.columns), apns_environment, live_jobs FROM devices WHERE id = $1::text", [.text(id)],
                    { (Device(row: $0), $0.optionalText(7), $0.int(8)) }
                ).first
            else { return nil }
            // The head is the device's oldest live job; dead letters grouped by reason, through jobs_by_device.
            let rows = try db.rows(
                """
                SELECT 'oldest', '', min(created_at), 0 FROM jobs WHERE device_id = $1::text AND state IN \(Self.headStates)
                UNION ALL
                SELECT 'dead', last_error, 0, count(*) FROM jobs WHERE device_id = $1::text AND state = 'discarded' GROUP BY last_error
                """, [.text(id)], { (kind: $0.text(0), reason: $0.text(1), at: $0.optionalInt64(2), count: $0.int(3)) })
            var reasons: [String: Int] = [:]
            for row in rows where row.kind == "dead" { reasons[row.reason, default: 0] += row.count }
            return DeviceSummary(
                device: device, environment: environment, liveJobs: live, oldestLiveJobAt: rows.first { $0.kind == "oldest" }?.at,
                deadLettersByReason: reasons)
        }
    }
}
