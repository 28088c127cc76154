import Common
import Foundation
import Ingest
import Queue
import Synchronization
import TestSupport
import Testing

/// Several writer threads (a store that takes two enqueue transactions at once, as PostgreSQL does) must still
/// commit each device's jobs in the order they arrived.
@Suite struct QueueWriterTests {
    /// `IngestService.shutdown` stops the writer; a second shutdown waited for threads that had already ended.
    @Test func stoppingTwiceReturns() throws {
        let directory = TemporaryDirectory()
        let writer = QueueWriter(
            store: try SQLiteStore(path: directory.path("relay.db"), now: 0), clock: SystemClock(), ttl: .seconds(60),
            logger: Logger(label: "test", level: .error), metrics: MetricsRegistry())
        writer.stop()
        let stoppedAgain = DispatchSemaphore(value: 0)
        Thread {
            writer.stop()
            stoppedAgain.signal()
        }.start()
        #expect(stoppedAgain.wait(timeout: .now() + 10) == .success)
    }

    @Test func twoWriterThreadsNeverSplitADeviceAcrossBatchesInFlight() throws {
        let directory = TemporaryDirectory()
        let store = TwoAtOnce(inner: try SQLiteStore(path: directory.path("relay.db"), now: 0))
        let metrics = MetricsRegistry()
        let writer = QueueWriter(
            store: store, clock: SystemClock(), ttl: .seconds(60), logger: Logger(label: "test", level: .error), metrics: metrics)
        defer { writer.stop() }
        let committed = Mutex<[String]>([])
        let a2Done = DispatchSemaphore(value: 0)
        let b1Done = DispatchSemaphore(value: 0)
        func submit(_ label: String, device: String, then done: DispatchSemaphore? = nil) {
            writer.submit(NewJob(deviceID: device, publicID: label, payload: [])) { _ in
                committed.withLock { $0.append(label) }
                done?.signal()
            }
        }

        submit("a1", device: "device-a")
        #expect(store.firstEntered.wait(timeout: .now() + 10) == .success, "the first batch is being committed")
        submit("a2", device: "device-a", then: a2Done)
        submit("b1", device: "device-b", then: b1Done)
        // The second thread commits b1 at once; a2 waits for a1's batch, whose device it shares.
        #expect(b1Done.wait(timeout: .now() + 10) == .success)
        #expect(store.batches.withLock { $0 } == [["a1"], ["b1"]])
        #expect(committed.withLock { $0 } == ["b1"])

        store.releaseFirst.signal()
        #expect(a2Done.wait(timeout: .now() + 10) == .success)
        #expect(store.batches.withLock { $0 } == [["a1"], ["b1"], ["a2"]])
        #expect(committed.withLock { $0 } == ["b1", "a1", "a2"])
    }
}

/// Takes two enqueues at once and holds the first until the test releases it; records every batch's public ids.
/// @unchecked Sendable: besides the inner store it holds semaphores and a Mutex, which are thread-safe.
private final class TwoAtOnce: ForwardingStore, @unchecked Sendable {
    let firstEntered = DispatchSemaphore(value: 0)
    let releaseFirst = DispatchSemaphore(value: 0)
    let batches = Mutex<[[String]]>([])

    override var concurrentEnqueues: Int { 2 }

    override func enqueue(_ jobs: some Sequence<NewJob>, now: Int64, ttl: Duration, deviceCap: Int) throws(StoreError) -> [EnqueueResult] {
        let jobs = Array(jobs)
        let isFirst = batches.withLock { batches in
            batches.append(jobs.map(\.publicID))
            return batches.count == 1
        }
        if isFirst {
            firstEntered.signal()
            _ = releaseFirst.wait(timeout: .now() + 10)
        }
        return try inner.enqueue(jobs, now: now, ttl: ttl, deviceCap: deviceCap)
    }
}
