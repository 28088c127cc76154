import Foundation
import PostgresDriver
import TestSupport
import Testing

@testable import Queue

/// Plans PostgreSQL must not be left to choose. A completion batch promotes each device's next job with one
/// statement whose only good plan walks each device's (device_id, id) index to its first pending job. With no
/// statistics on `jobs` (a new database, before autovacuum's first ANALYZE) PostgreSQL preferred a bitmap scan that
/// reads every job of every device and sorts them: two to three times the time at 50 jobs per device, and growing
/// with the backlog (docs/performance.md).
@Suite struct PostgresPlanTests {
    @Test func thePromotionOfManyDevicesWalksTheirIndexEvenWithoutStatistics() throws {
        let db = try TestDatabase(.postgres)
        let connection = try PGConnection(conninfo: db.location, options: .init())
        // No ANALYZE behind the test's back: the table keeps having no statistics while it fills.
        try connection.execute("ALTER TABLE jobs SET (autovacuum_enabled = false)")
        let devices = try (1...40).map { try db.device($0) }
        for device in devices {
            let results = try db.store.enqueue(
                (1...30).map { NewJob(deviceID: device, publicID: UUID().uuidString, payload: Array("job \($0)".utf8)) },
                now: TestDatabase.t0, ttl: .seconds(3600), deviceCap: .max)
            #expect(results.allSatisfy { $0 == .queued })
        }
        #expect(try connection.rows("SELECT reltuples < 0 FROM pg_class WHERE relname = 'jobs'", prepare: false) { $0.bool(0) } == [true])

        let devicesLiteral = "'{\(devices.joined(separator: ","))}'"
        // A generic plan is made at the first EXECUTE and kept: one prepared statement per way of running it.
        func plan(_ name: String, after statements: [String]) throws -> String {
            try connection.execute("PREPARE \(name) (text[]) AS \(PostgresStore.promoteNextOfDevices)")
            try connection.execute("BEGIN")
            defer { try? connection.execute("ROLLBACK") }
            for sql in statements { try connection.execute(sql) }
            return try connection.rows("EXPLAIN EXECUTE \(name) (\(devicesLiteral))", prepare: false) { $0.text(0) }
                .joined(separator: "\n")
        }
        // The case the settings are for: with the generic plan alone, PostgreSQL reads every job of each device. (A
        // later PostgreSQL may plan the walk by itself; then this fails, and the setting may no longer be needed.)
        let unhelped = try plan("generic_only", after: ["SET LOCAL plan_cache_mode = force_generic_plan"])
        #expect(unhelped.contains("Bitmap Heap Scan on jobs"), "without the setting PostgreSQL now plans: \(unhelped)")

        // What `finish` sends, up to the promotion itself.
        let steps = PostgresStore.promotion(of: devices)
        let promotionIndex = try #require(steps.firstIndex { $0.sql == PostgresStore.promoteNextOfDevices })
        let chosen = try plan("as_the_relay_runs_it", after: steps[..<promotionIndex].map(\.sql))
        #expect(chosen.contains("Index Scan using jobs_by_device on jobs"), "\(chosen)")
        #expect(!chosen.contains("Bitmap"), "\(chosen)")
        #expect(steps[(promotionIndex + 1)...].map(\.sql) == ["SET LOCAL plan_cache_mode TO DEFAULT", "SET LOCAL enable_bitmapscan TO DEFAULT"])
    }

    @Test func finishSendsThePromotionOfSeveralDevicesUnderItsPlannerSettings() throws {
        let db = try TestDatabase(.postgres)
        let store = try #require(db.store as? PostgresStore)
        let devices = try (1...3).map { try db.device($0) }
        for device in devices { try db.enqueue(device, "first", "second") }
        let heads = try db.claim()
        #expect(heads.map(\.label) == ["first", "first", "first"])

        store.keepWriterStatementLog()
        #expect(try db.store.finish(heads.map { .delivered($0) }, worker: "w1", now: TestDatabase.t0) == [true, true, true])
        let sent = store.writerStatementLog
        let expected = PostgresStore.promotion(of: devices).map(\.sql)
        let start = try #require(sent.firstIndex(of: expected[0]), "\(sent)")
        #expect(Array(sent[start...].prefix(expected.count)) == expected, "the settings, the promotion, the settings back")
        for device in devices { #expect(try db.liveLabels(device) == ["second"]) }
    }
}
