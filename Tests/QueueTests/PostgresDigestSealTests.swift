import Common
import Foundation
import Synchronization
import TestSupport
import Testing

@testable import Queue

/// PostgreSQL's sealed backlog read (`PostgresStore.carryBacklog`) against an enqueue folding into a job it is about
/// to carry, committed while the read waits: the read locks the device row first, as enqueue does before it reads
/// its tail, so it reads after the fold's commit and carries the job with the alert in it. A read as of the start of
/// its statement would carry the job without that alert, `finish` would leave the job behind, and it would go out
/// again with every alert the digest showed.
@Suite struct PostgresDigestSealTests {
    @Test func theSealedReadWaitsForAFoldInProgressAndCarriesIt() throws {
        let db = try TestDatabase(.postgres)
        let device = try db.device(1)
        try db.enqueue(device, "head", "waiting")
        _ = try #require(try db.claim().first)
        var folded = FoldedAlerts()
        folded.add(AlertEvent(kind: .monitor, status: .down, monitorID: 7, monitorName: "M7", message: "down"))
        let hex = folded.encoded.map { String(format: "%02x", $0) }.joined()

        // Another ingest's transaction, as `PostgresStore.enqueue` runs it: the device locked, its tail folded into.
        let ingest = try RawPostgres(db.location)
        try ingest.execute("BEGIN")
        try ingest.execute("SELECT 1 FROM devices WHERE id = '\(device)' FOR NO KEY UPDATE")
        try ingest.execute(
            "UPDATE jobs SET folded = '\\x\(hex)'::bytea, folded_count = 1 WHERE device_id = '\(device)' AND state = 'pending'")

        let store = db.store
        let result = Mutex<Result<[PendingJob], StoreError>?>(nil)
        let reading = Thread {
            let carried = Result { () throws(StoreError) in try store.carryBacklog(deviceID: device, limit: 10, minimum: 0, deviceCap: .max) }
            result.withLock { $0 = carried }
        }
        reading.start()
        try waitUntil("the read to wait for the ingest's lock") {
            try ingest.query("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()")
                == [["1"]]
        }
        try ingest.execute("COMMIT")
        try waitUntil("the read to return") { result.withLock { $0 != nil } }
        let carried = try #require(try result.withLock { try $0?.get() })
        #expect(carried.map(\.folded.count) == [1], "carried with the alert folded in before the read")
    }
}
