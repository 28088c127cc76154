import CSQLite
import Common
import Foundation
import Queue

// Queue throughput for `make bench`, printed as one JSON object:
//   raw_insert_rps      rows/s inserted into the jobs table with a bare prepared INSERT (the ceiling)
//   enqueue_rps         jobs/s through SQLiteStore.enqueue in batches of 1,000 (one transaction each)
//   claim_rate_10k      jobs/s claimed and completed (batches of 1,000) with 10,000 jobs queued
//   claim_rate_1m       the same with 1,000,000 jobs queued
// Both claim runs have the same shape — 1,000 devices, each with jobs waiting behind its head, so every
// completion promotes the next job — and differ only in how much is queued: 10 or 1,000 jobs per device.
// Usage: QueueBench DIRECTORY [--million N]   (N defaults to 1,000,000)
//        QueueBench postgres URL_ENQUEUE URL_10K URL_1M [--million N]
//                                                  the same enqueue and claim figures on PostgreSQL, one empty
//                                                  database per run (no raw_insert_rps)
//        QueueBench prefill DATABASE JOBS DEVICES  (fills a relay database for the delivery benchmarks; prints the
//                                                   device tokens' seed range on stderr)

let arguments = CommandLine.arguments
if arguments.count == 5, arguments[1] == "prefill" {
    let clock = SystemClock()
    let store = try SQLiteStore(path: arguments[2], now: clock.nowMillis())
    let jobs = Int(arguments[3])!, deviceCount = Int(arguments[4])!
    let ids = try (0..<deviceCount).map { index in
        try store.registerDevice(token: String(format: "%064x", index + 1), authTokenHash: "h", now: 0, newID: { try DeviceID.generate() }).device.id
    }
    var batch: [NewJob] = []
    for index in 0..<jobs {
        let event = AlertEvent(kind: .monitor, status: .down, monitorID: index % deviceCount, monitorName: "Monitor \(index % deviceCount)",
                               message: "\(index / deviceCount)")
        batch.append(NewJob(deviceID: ids[index % deviceCount], publicID: UUID().uuidString.lowercased(),
                            payload: event.jobPayload))
        if batch.count == 1000 {
            _ = try store.enqueue(batch, now: clock.nowMillis(), ttl: .seconds(86_400))
            batch.removeAll(keepingCapacity: true)
        }
    }
    if !batch.isEmpty { _ = try store.enqueue(batch, now: clock.nowMillis(), ttl: .seconds(86_400)) }
    exit(0)
}
let directory = arguments.count > 1 ? arguments[1] : NSTemporaryDirectory()
let million = arguments.firstIndex(of: "--million").map { Int(arguments[$0 + 1])! } ?? 1_000_000
let devices = 1_000
let clock = SystemClock()

func log(_ message: String) { FileHandle.standardError.write(Data("queue-bench: \(message)\n".utf8)) }

func freshStore(_ name: String) throws -> (SQLiteStore, [String], String) {
    let path = "\(directory)/\(name).db"
    for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
    let store = try SQLiteStore(path: path, now: clock.nowMillis())
    var ids: [String] = []
    ids.reserveCapacity(devices)
    for index in 0..<devices {
        ids.append(try store.registerDevice(token: String(format: "%064x", index), authTokenHash: "h", now: 0, newID: { try DeviceID.generate() }).device.id)
    }
    return (store, ids, path)
}

let payload = AlertEvent(kind: .monitor, status: .down, monitorID: 1, monitorName: "Shop API",
                         message: "Request failed with status code 503").jobPayload

func enqueue(_ store: any RelayStore, _ ids: [String], perDevice: Int) throws -> Double {
    let start = ContinuousClock.now
    var batch: [NewJob] = []
    batch.reserveCapacity(1000)
    for round in 0..<perDevice {
        for id in ids {
            batch.append(NewJob(deviceID: id, publicID: "\(round)-\(id)-\(UUID().uuidString)", payload: payload))
            if batch.count == 1000 {
                _ = try store.enqueue(batch, now: clock.nowMillis(), ttl: .seconds(86_400))
                batch.removeAll(keepingCapacity: true)
            }
        }
    }
    if !batch.isEmpty { _ = try store.enqueue(batch, now: clock.nowMillis(), ttl: .seconds(86_400)) }
    return Double(ids.count * perDevice) / (ContinuousClock.now - start).seconds
}

/// Claims and completes `count` jobs in batches of 1,000; returns jobs/s.
func claimAndComplete(_ store: any RelayStore, count: Int) throws -> Double {
    let start = ContinuousClock.now
    var done = 0
    while done < count {
        let jobs = try store.claim(worker: "bench", limit: min(1000, count - done), now: clock.nowMillis(), lease: .seconds(60))
        if jobs.isEmpty { break }
        _ = try store.finish(jobs.map { JobOutcome(jobID: $0.id, attempt: $0.attempt, kind: .delivered) }, worker: "bench", now: clock.nowMillis())
        done += jobs.count
    }
    return Double(done) / (ContinuousClock.now - start).seconds
}

/// The ceiling: the same rows with one prepared INSERT, 1,000 per transaction, no head-of-device logic.
func rawInserts(path: String, ids: [String], count: Int) -> Double {
    var db: OpaquePointer?
    sqlite3_open(path, &db)
    defer { sqlite3_close(db) }
    sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA secure_delete=ON", nil, nil, nil)
    var statement: OpaquePointer?
    sqlite3_prepare_v2(db, "INSERT INTO jobs (public_id, device_id, state, payload, created_at, scheduled_at, expires_at) VALUES (?, ?, 'pending', ?, 0, 0, 0)", -1, &statement, nil)
    defer { sqlite3_finalize(statement) }
    let start = ContinuousClock.now
    for index in 0..<count {
        if index % 1000 == 0 { sqlite3_exec(db, "BEGIN IMMEDIATE", nil, nil, nil) }
        sqlite3_bind_text(statement, 1, "raw-\(index)", -1, CSQLite_transient())
        sqlite3_bind_text(statement, 2, ids[index % ids.count], -1, CSQLite_transient())
        _ = payload.withUnsafeBytes { sqlite3_bind_blob(statement, 3, $0.baseAddress, Int32($0.count), CSQLite_transient()) }
        sqlite3_step(statement)
        sqlite3_reset(statement)
        if index % 1000 == 999 { sqlite3_exec(db, "COMMIT", nil, nil, nil) }
    }
    sqlite3_exec(db, "COMMIT", nil, nil, nil)
    return Double(count) / (ContinuousClock.now - start).seconds
}

/// A PostgreSQL database with the benchmark's devices.
func postgresStore(_ url: String) throws -> (PostgresStore, [String]) {
    let store = try PostgresStore(url: url, now: clock.nowMillis())
    let ids = try (0..<devices).map { index in
        try store.registerDevice(token: String(format: "%064x", index), authTokenHash: "h", now: 0, newID: { try DeviceID.generate() }).device.id
    }
    return (store, ids)
}

if arguments.count >= 5, arguments[1] == "postgres" {
    do {
        log("postgres: enqueue (100,000 jobs)")
        let (enqueueStore, enqueueIDs) = try postgresStore(arguments[2])
        let enqueueRate = try enqueue(enqueueStore, enqueueIDs, perDevice: 100)
        log("postgres: claim + complete with 10,000 queued")
        let (small, smallIDs) = try postgresStore(arguments[3])
        _ = try enqueue(small, smallIDs, perDevice: 10)
        let claim10k = try claimAndComplete(small, count: 10_000)
        log("postgres: prefilling \(million) jobs (this takes a while)")
        let (large, largeIDs) = try postgresStore(arguments[4])
        let prefill = try enqueue(large, largeIDs, perDevice: million / devices)
        log("postgres: claim + complete with \(million) queued")
        let claim1m = try claimAndComplete(large, count: 10_000)
        print("{\"enqueue_rps\":\(Int(enqueueRate)),\"claim_rate_10k\":\(Int(claim10k)),\"claim_rate_1m\":\(Int(claim1m)),"
              + "\"prefill_rps\":\(Int(prefill)),\"queued_large\":\(million)}")
        exit(0)
    } catch {
        log("failed: \(error)")
        exit(1)
    }
}

do {
    log("raw inserts and enqueue (100,000 jobs each)")
    let (rawStore, rawIDs, rawPath) = try freshStore("raw")
    _ = rawStore
    let raw = rawInserts(path: rawPath, ids: rawIDs, count: 100_000)
    let (enqueueStore, enqueueIDs, _) = try freshStore("enqueue")
    let enqueueRate = try enqueue(enqueueStore, enqueueIDs, perDevice: 100)

    log("claim + complete with 10,000 queued")
    let (small, smallIDs, _) = try freshStore("claim-10k")
    _ = try enqueue(small, smallIDs, perDevice: 10)
    try small.checkpoint()
    let claim10k = try claimAndComplete(small, count: 10_000)

    log("prefilling \(million) jobs (this takes a while)")
    let (large, largeIDs, _) = try freshStore("claim-1m")
    let prefill = try enqueue(large, largeIDs, perDevice: million / devices)
    // Fold the prefill's WAL into the database first, so the claims do not pay for the prefill's checkpoint.
    try large.checkpoint()
    log("claim + complete with \(million) queued")
    let claim1m = try claimAndComplete(large, count: 10_000)
    print("{\"raw_insert_rps\":\(Int(raw)),\"enqueue_rps\":\(Int(enqueueRate)),\"claim_rate_10k\":\(Int(claim10k)),"
          + "\"claim_rate_1m\":\(Int(claim1m)),\"prefill_rps\":\(Int(prefill)),\"queued_large\":\(million)}")
} catch {
    log("failed: \(error)")
    exit(1)
}
