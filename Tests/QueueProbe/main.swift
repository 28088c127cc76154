import Common
import Foundation
import Queue

// A helper process for the queue's multi-process tests: it opens the same database as the test and claims,
// holds or enqueues jobs, printing what it did, so the test can race two of them or kill one at a chosen moment.
//
//   QueueProbe drain DB WORKER BATCH SEND_MS
//                                          claim and complete until the queue is empty, spending SEND_MS
//                                          between claim and completion as a push round trip would; prints
//                                          "claimed <job> <device> <seq> <t>" and "completing <job> <t>"
//                                          (t = CLOCK_MONOTONIC nanoseconds, comparable across processes)
//   QueueProbe hold DB WORKER LEASE_MS N   claim up to N jobs, print "held <job>..." then wait to be killed
//   QueueProbe enqueue DB DEVICE BATCH     enqueue batches of BATCH jobs; prints "committed <k>" after each;
//                                          in the middle of batch 3 prints "mid-batch" and waits to be killed
//   QueueProbe rescue DB                   makes the jobs whose lease expired due again; prints "rescued <n>"
//   QueueProbe retry-due DB                makes every retryable job due now; prints "made due <n>"
//   QueueProbe take-back DB WORKER         gives WORKER's leases back; prints "taken back <n>"

let arguments = CommandLine.arguments
guard arguments.count >= 3 else { fatalError("usage: QueueProbe drain|hold|enqueue|rescue|retry-due|take-back DB ...") }
// DB is a SQLite file or a PostgreSQL connection string, as DATABASE_PATH or DATABASE_URL would be.
// PROBE_TEMP_STORE=file: SQLite's temporary files on disk, as without the relay's `temp_store = MEMORY`.
var sqliteOptions = SQLiteStore.Options()
sqliteOptions.temporaryTablesInMemory = ProcessInfo.processInfo.environment["PROBE_TEMP_STORE"] != "file"
let store: any RelayStore =
    PostgresStore.isDatabaseURL(arguments[2])
    ? try PostgresStore(url: arguments[2], now: SystemClock().nowMillis())
    : try SQLiteStore(path: arguments[2], options: sqliteOptions, now: SystemClock().nowMillis())

/// Writes straight to the pipe (no stdio buffering), so the test sees each line the moment it is printed.
func emit(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

func monotonicNanos() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
}

/// Blocks until the test kills this process (it never writes to our stdin).
func waitToBeKilled() -> Never {
    while true {
        _ = readLine()
        pause()
    }
}

switch arguments[1] {
case "drain":
    let worker = arguments[3]
    let batch = Int(arguments[4])!
    let sendTime = Duration.milliseconds(Int64(arguments[5])!)
    var output = ""
    while true {
        let jobs = try store.claim(worker: worker, limit: batch, now: SystemClock().nowMillis(), lease: .seconds(600))
        let claimedAt = monotonicNanos()
        if jobs.isEmpty {
            if try store.liveJobCount() == 0 { break }
            continue
        }
        for job in jobs {
            output += "claimed \(job.id) \(job.deviceID) \(String(decoding: job.payload, as: UTF8.self)) \(claimedAt)\n"
        }
        // Stands in for the APNs round trip. Without it a tight loop re-takes the write lock the instant it frees
        // it and the other process's busy handler rarely gets a turn, which is not how deliverers behave.
        Thread.sleep(forTimeInterval: sendTime.seconds)
        let completingAt = monotonicNanos()
        for job in jobs { output += "completing \(job.id) \(completingAt)\n" }
        let applied = try store.finish(
            jobs.map { JobOutcome($0, kind: .delivered) },
            worker: worker, now: SystemClock().nowMillis())
        precondition(applied.allSatisfy { $0 }, "a completion lost its lease")
    }
    FileHandle.standardOutput.write(Data(output.utf8))
case "hold":
    let jobs = try store.claim(
        worker: arguments[3], limit: Int(arguments[5])!, now: SystemClock().nowMillis(),
        lease: .milliseconds(Int64(arguments[4])!))
    emit("held " + jobs.map { String($0.id) }.joined(separator: " "))
    waitToBeKilled()
case "enqueue":
    let device = arguments[3]
    let batchSize = Int(arguments[4])!
    var batch = 0
    while true {
        batch += 1
        let number = batch
        // A lazy sequence: the enqueue transaction pulls jobs from it one by one, so halting inside it halts
        // the process in the middle of an open transaction.
        let jobs = (0..<batchSize).lazy.map { index -> NewJob in
            if number == 3 && index == batchSize / 2 {
                emit("mid-batch")
                waitToBeKilled()
            }
            return NewJob(deviceID: device, publicID: UUID().uuidString, payload: Array("\(number)-\(index)".utf8))
        }
        _ = try store.enqueue(jobs, now: SystemClock().nowMillis(), ttl: .seconds(3600))
        emit("committed \(number)")
    }
case "rescue":
    emit("rescued \(try store.rescueExpiredLeases(now: SystemClock().nowMillis()))")
case "retry-due":
    emit("made due \(try store.makeRetryableDue(now: SystemClock().nowMillis()))")
case "take-back":
    emit("taken back \(try store.takeBackLeases(of: arguments[3], now: SystemClock().nowMillis()))")
default:
    fatalError("unknown probe command \(arguments[1])")
}
