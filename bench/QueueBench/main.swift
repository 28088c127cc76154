import CSQLite
import Common
import Foundation
import Queue

// Queue throughput for `make bench`, printed as one JSON object whose figures are lists, one value per run:
//   raw_insert_rps      rows/s inserted into the jobs table with a bare prepared INSERT (the ceiling)
//   enqueue_rps         jobs/s through SQLiteStore.enqueue in batches of 1,000 (one transaction each)
//   claim_rate_10k      jobs/s claimed and completed (batches of 1,000) with 10,000 jobs queued
//   claim_rate_1m       the same with 1,000,000 jobs queued
//   claim_cpu_us_10k    CPU time of this process (every thread: the store's checkpointer too) per job claimed and
//                       completed with 10,000 queued, in µs: what the durable queue alone costs a delivered push
//   floor_bare_cpu_us   the same jobs' row changes as bare prepared statements (BareFloor), CPU µs per job: the
//                       floor's own ceiling
//   floor_bare_cpu_us_no_secure_delete   the same with secure_delete off: what zeroing deleted rows costs
// Both claim runs have the same shape — 1,000 devices, each with jobs waiting behind its head, so every
// completion promotes the next job — and differ only in how much is queued: 10 or 1,000 jobs per device.
// `--runs N` (default 1) repeats each figure N times; the 1M database is filled once and each run claims 10,000
// of it (so the last run still has 98 % of it queued), the 10k database is refilled before each run.
// Usage: QueueBench DIRECTORY [--million N] [--runs N]   (N defaults to 1,000,000)
//        QueueBench postgres URL_ENQUEUE URL_10K URL_1M [--million N] [--runs N]
//                                                  the same enqueue and claim figures on PostgreSQL, one empty
//                                                  database per figure (no raw_insert_rps)
//        QueueBench raw DIRECTORY [--runs N]       only raw_insert_rps (the ingest phase's second ceiling)
//        QueueBench floor DIRECTORY CLAIMS         only the floor's claims and completions, CLAIMS of them (callgrind)
//        QueueBench shape DIRECTORY BATCH JOBS [--no-monitor]
//                                                  ingest's store work alone: JOBS jobs enqueued in transactions of
//                                                  BATCH, each to a device drawn at random of 1,000, each reporting a
//                                                  monitor down (not with --no-monitor); prints jobs/s and CPU µs a job
//        QueueBench prefill DATABASE JOBS DEVICES  (fills a relay database for the delivery benchmarks: a SQLite path
//                                                   or a postgres:// URL)

let arguments = CommandLine.arguments
let clock = SystemClock()
let runs = arguments.firstIndex(of: "--runs").map { Int(arguments[$0 + 1])! } ?? 1

func openStore(_ location: String) throws -> any RelayStore {
    location.hasPrefix("postgres")
        ? try PostgresStore(url: location, now: clock.nowMillis()) : try SQLiteStore(path: location, now: clock.nowMillis())
}

if arguments.count == 5, arguments[1] == "prefill" {
    let store = try openStore(arguments[2])
    let jobs = Int(arguments[3])!
    let deviceCount = Int(arguments[4])!
    let ids = try (0..<deviceCount).map { index in
        try store.registerDevice(token: String(format: "%064x", index + 1), authTokenHash: "h", now: 0, newID: { try DeviceID.generate() }).device.id
    }
    var batch: [NewJob] = []
    for index in 0..<jobs {
        let event = AlertEvent(
            kind: .monitor, status: .down, monitorID: index % deviceCount, monitorName: "Monitor \(index % deviceCount)",
            message: "\(index / deviceCount)")
        batch.append(
            NewJob(
                deviceID: ids[index % deviceCount], publicID: UUID().uuidString.lowercased(),
                payload: event.jobPayload))
        if batch.count == 1000 {
            _ = try store.enqueue(batch, now: clock.nowMillis(), ttl: .seconds(86_400))
            batch.removeAll(keepingCapacity: true)
        }
    }
    if !batch.isEmpty { _ = try store.enqueue(batch, now: clock.nowMillis(), ttl: .seconds(86_400)) }
    exit(0)
}
let directory =
    arguments.count > 2 && ["raw", "floor", "shape"].contains(arguments[1])
    ? arguments[2] : arguments.count > 1 ? arguments[1] : NSTemporaryDirectory()
let million = arguments.firstIndex(of: "--million").map { Int(arguments[$0 + 1])! } ?? 1_000_000
let devices = 1_000

func log(_ message: String) { FileHandle.standardError.write(Data("queue-bench: \(message)\n".utf8)) }

/// `[a,b,c]`: one figure's runs, as JSON.
func list(_ values: [Double]) -> String { "[" + values.map { String(Int($0)) }.joined(separator: ",") + "]" }
func decimals(_ values: [Double]) -> String { "[" + values.map { String(format: "%.2f", $0) }.joined(separator: ",") + "]" }

/// CPU seconds this process has used, all threads.
func processCPUSeconds() -> Double {
    var time = timespec()
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &time)
    return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
}

func removeStore(_ path: String) {
    for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
}

func freshStore(_ name: String) throws -> (SQLiteStore, [String], String) {
    let path = "\(directory)/\(name).db"
    removeStore(path)
    let store = try SQLiteStore(path: path, now: clock.nowMillis())
    var ids: [String] = []
    ids.reserveCapacity(devices)
    for index in 0..<devices {
        ids.append(
            try store.registerDevice(token: String(format: "%064x", index), authTokenHash: "h", now: 0, newID: { try DeviceID.generate() }).device.id)
    }
    return (store, ids, path)
}

let payload = AlertEvent(
    kind: .monitor, status: .down, monitorID: 1, monitorName: "Shop API",
    message: "Request failed with status code 503"
).jobPayload

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

/// Claims and completes `count` jobs in batches of 1,000: jobs/s, and this process's CPU µs per job.
func claimAndComplete(_ store: any RelayStore, count: Int) throws -> (rate: Double, cpuMicrosPerJob: Double) {
    let start = ContinuousClock.now
    let cpuStart = processCPUSeconds()
    var done = 0
    while done < count {
        let jobs = try store.claim(worker: "bench", limit: min(1000, count - done), now: clock.nowMillis(), lease: .seconds(60))
        if jobs.isEmpty { break }
        _ = try store.finish(jobs.map { JobOutcome($0, kind: .delivered) }, worker: "bench", now: clock.nowMillis())
        done += jobs.count
    }
    let seconds = (ContinuousClock.now - start).seconds
    return (Double(done) / seconds, (processCPUSeconds() - cpuStart) / Double(max(done, 1)) * 1e6)
}

/// The ceiling: the same rows with one prepared INSERT, 1,000 per transaction, no head-of-device logic.
/// A failed statement stops the benchmark: a schema change must not turn the ceiling into a loop of no-ops.
func rawInserts(path: String, ids: [String], count: Int) throws -> Double {
    var db: OpaquePointer?
    sqlite3_open(path, &db)
    defer { sqlite3_close(db) }
    sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA secure_delete=ON", nil, nil, nil)
    var statement: OpaquePointer?
    let insert = """
        INSERT INTO jobs (public_id, device_id, device_seq, state, payload, created_at, scheduled_at, expires_at)
        VALUES (?, ?, ?, 'pending', ?, 0, 0, 0)
        """
    guard sqlite3_prepare_v2(db, insert, -1, &statement, nil) == SQLITE_OK else {
        throw RawInsertFailed(message: String(cString: sqlite3_errmsg(db)))
    }
    defer { sqlite3_finalize(statement) }
    let start = ContinuousClock.now
    for index in 0..<count {
        if index % 1000 == 0 { sqlite3_exec(db, "BEGIN IMMEDIATE", nil, nil, nil) }
        sqlite3_bind_text(statement, 1, "raw-\(index)", -1, CSQLite_transient())
        sqlite3_bind_text(statement, 2, ids[index % ids.count], -1, CSQLite_transient())
        // Each device's job number, as the relay gives it (here the schema's insert trigger moves the device's counter
        // on, which the relay's writer does in one update a device a batch instead).
        sqlite3_bind_int64(statement, 3, Int64(index / ids.count))
        _ = payload.withUnsafeBytes { sqlite3_bind_blob(statement, 4, $0.baseAddress, Int32($0.count), CSQLite_transient()) }
        guard sqlite3_step(statement) == SQLITE_DONE else { throw RawInsertFailed(message: String(cString: sqlite3_errmsg(db))) }
        sqlite3_reset(statement)
        if index % 1000 == 999 { sqlite3_exec(db, "COMMIT", nil, nil, nil) }
    }
    sqlite3_exec(db, "COMMIT", nil, nil, nil)
    return Double(count) / (ContinuousClock.now - start).seconds
}

struct RawInsertFailed: Error { let message: String }

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
        log("postgres: enqueue (100,000 jobs) × \(runs)")
        let (enqueueStore, enqueueIDs) = try postgresStore(arguments[2])
        let enqueueRates = try (0..<runs).map { _ in try enqueue(enqueueStore, enqueueIDs, perDevice: 100) }
        let (small, smallIDs) = try postgresStore(arguments[3])
        log("postgres: prefilling \(million) jobs (this takes a while)")
        let (large, largeIDs) = try postgresStore(arguments[4])
        let prefill = try enqueue(large, largeIDs, perDevice: million / devices)
        var claim10k: [Double] = []
        var claim1m: [Double] = []
        for run in 1...runs {
            log("postgres: claim + complete with 10,000 queued, then with \(million) queued (run \(run) of \(runs))")
            _ = try enqueue(small, smallIDs, perDevice: 10)
            claim10k.append(try claimAndComplete(small, count: 10_000).rate)
            claim1m.append(try claimAndComplete(large, count: 10_000).rate)
        }
        print(
            "{\"enqueue_rps\":\(list(enqueueRates)),\"claim_rate_10k\":\(list(claim10k)),\"claim_rate_1m\":\(list(claim1m)),"
                + "\"prefill_rps\":\(Int(prefill)),\"queued_large\":\(million)}")
        exit(0)
    } catch {
        log("failed: \(error)")
        exit(1)
    }
}

// The floor's setup (10,000 queued, 10 per device) and CLAIMS of its claims and completions, nothing else, for
// callgrind: the difference of two runs over the difference of their CLAIMS is the floor in instructions per job,
// the checkpointer's included (docs/performance.md, twenty-first session). Prints the CPU µs per job.
if arguments.count == 4, arguments[1] == "floor" {
    do {
        let (store, ids, path) = try freshStore("floor")
        _ = try enqueue(store, ids, perDevice: 10)
        try store.checkpoint()
        let result = try claimAndComplete(store, count: Int(arguments[3])!)
        removeStore(path)  // now: `exit` runs no `defer`
        print("{\"floor_cpu_us_per_job\":[\(String(format: "%.2f", result.cpuMicrosPerJob))]}")
        exit(0)
    } catch {
        log("failed: \(error)")
        exit(1)
    }
}

// What ingest's queue writer does to the store, without HTTP: a group commit under `make bench`'s ingest load holds
// about 15 jobs to random devices (docs/performance.md, thirty-fourth session).
if arguments.count > 1, arguments[1] == "shape" {
    guard arguments.count >= 5, let batchSize = Int(arguments[3]), let total = Int(arguments[4]), batchSize > 0, total > 0 else {
        log("usage: QueueBench shape DIRECTORY BATCH JOBS [--no-monitor] (BATCH and JOBS above 0)")
        exit(2)
    }
    do {
        let monitor = arguments.contains("--no-monitor") ? nil : MonitorReport(key: "id:1", isDown: true)
        let (store, ids, path) = try freshStore("shape")
        let jobs = (0..<total).map { _ in
            NewJob(deviceID: ids.randomElement()!, publicID: UUID().uuidString.lowercased(), payload: payload, monitor: monitor)
        }
        let cpuBefore = processCPUSeconds()
        let start = ContinuousClock.now
        for first in stride(from: 0, to: total, by: batchSize) {
            _ = try store.enqueue(jobs[first..<min(first + batchSize, total)], now: clock.nowMillis(), ttl: .seconds(86_400))
        }
        let seconds = (ContinuousClock.now - start).seconds
        removeStore(path)  // now: `exit` runs no `defer`
        print(
            String(
                format: "{\"jobs_per_second\":%.0f,\"cpu_us_per_job\":%.2f}", Double(total) / seconds,
                (processCPUSeconds() - cpuBefore) / Double(total) * 1e6))
        exit(0)
    } catch {
        log("failed: \(error)")
        exit(1)
    }
}

if arguments.count >= 3, arguments[1] == "raw" {
    do {
        let rates = try (0..<runs).map { run -> Double in
            let (store, ids, path) = try freshStore("raw-\(run)")
            _ = store
            defer { removeStore(path) }
            return try rawInserts(path: path, ids: ids, count: 100_000)
        }
        print("{\"raw_insert_rps\":\(list(rates))}")
        exit(0)
    } catch {
        log("failed: \(error)")
        exit(1)
    }
}

do {
    log("raw inserts and enqueue (100,000 jobs each) × \(runs)")
    var raw: [Double] = []
    var enqueueRates: [Double] = []
    for run in 0..<runs {
        // Each run's files go once measured: the claim runs below must not share the page cache with them.
        do {
            let (rawStore, rawIDs, rawPath) = try freshStore("raw-\(run)")
            _ = rawStore
            raw.append(try rawInserts(path: rawPath, ids: rawIDs, count: 100_000))
            removeStore(rawPath)
        }
        do {
            let (enqueueStore, enqueueIDs, enqueuePath) = try freshStore("enqueue-\(run)")
            enqueueRates.append(try enqueue(enqueueStore, enqueueIDs, perDevice: 100))
            removeStore(enqueuePath)
        }
    }
    let (small, smallIDs, _) = try freshStore("claim-10k")
    log("prefilling \(million) jobs (this takes a while)")
    let (large, largeIDs, _) = try freshStore("claim-1m")
    let prefill = try enqueue(large, largeIDs, perDevice: million / devices)
    // Fold the prefill's WAL into the database first, so the claims do not pay for the prefill's checkpoint.
    try large.checkpoint()
    var claim10k: [Double] = []
    var claimCPU10k: [Double] = []
    var claim1m: [Double] = []
    var bare: [Double] = []
    var bareNoSecureDelete: [Double] = []
    /// A fresh database with 10,000 jobs queued (10 per device), folded into the file, the store closed.
    func bareFloor(secureDelete: Bool) throws -> Double {
        let path: String
        do {
            let (store, ids, storePath) = try freshStore("bare-10k")
            _ = try enqueue(store, ids, perDevice: 10)
            try store.checkpoint()
            path = storePath
        }
        defer { removeStore(path) }
        return try BareFloor(path: path, secureDelete: secureDelete).run(count: 10_000)
    }
    for run in 1...runs {
        log("claim + complete with 10,000 queued, then with \(million) queued (run \(run) of \(runs))")
        log("  bare statements with 10,000 queued, secure_delete on and off")
        bare.append(try bareFloor(secureDelete: true))
        bareNoSecureDelete.append(try bareFloor(secureDelete: false))
        _ = try enqueue(small, smallIDs, perDevice: 10)
        try small.checkpoint()
        log("  claim + complete with 10,000 queued")
        let small10k = try claimAndComplete(small, count: 10_000)
        claim10k.append(small10k.rate)
        claimCPU10k.append(small10k.cpuMicrosPerJob)
        log("  claim + complete with \(million) queued")
        claim1m.append(try claimAndComplete(large, count: 10_000).rate)
        log("  run \(run) done")
    }
    print(
        "{\"raw_insert_rps\":\(list(raw)),\"enqueue_rps\":\(list(enqueueRates)),\"claim_rate_10k\":\(list(claim10k)),"
            + "\"claim_rate_1m\":\(list(claim1m)),\"claim_cpu_us_10k\":\(decimals(claimCPU10k)),"
            + "\"floor_bare_cpu_us\":\(decimals(bare)),\"floor_bare_cpu_us_no_secure_delete\":\(decimals(bareNoSecureDelete)),"
            + "\"prefill_rps\":\(Int(prefill)),\"queued_large\":\(million)}")
} catch {
    log("failed: \(error)")
    exit(1)
}
