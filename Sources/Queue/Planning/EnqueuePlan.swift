/// What becomes of one arriving job, decided once for both stores (SPEC §4 "No single point of trouble": no device
/// ever holds more than `DEVICE_QUEUE_MAX` live jobs, whatever is posted to it; the one exception, a deliverer with a
/// larger DEVICE_QUEUE_MAX than ingest's, is `plan`'s sealed-tail fallback, see `DigestCarry`).
///
/// The stores read the device as the batch has left it so far (SQLite row by row, PostgreSQL per chunk) and apply
/// the decision in their own dialect; the rule itself lives only here.
enum EnqueuePlan {
    /// The device, as the arriving job finds it.
    struct Device: Sendable, Equatable {
        /// Live jobs: its head and the jobs waiting behind it, whatever their kind.
        var live: Int
        /// The live job a Test request waits on (at most one per device), if any.
        var waitingTest: WaitingTest?
    }

    /// A live job that reports its outcome to a waiting Test request.
    struct WaitingTest: Sendable, Equatable {
        var publicID: String
        var payload: [UInt8]
    }

    enum Decision: Sendable, Equatable {
        /// Stored as a job of its own, under the cap. `waits`: it reports its outcome to the Test request that
        /// posted it; otherwise it is an alert like any other, answered at once.
        case store(waits: Bool)
        /// At the cap: folded into the device's newest waiting job that does not report an outcome, whose push (a
        /// digest) accounts for it; with no such job it is refused for this device only (`EnqueueResult.deviceFull`).
        /// When a digest in flight carries that job (sealed, `DigestCarry`: only with a deliverer on a larger cap),
        /// the batch stores the alert as a job of its own instead (`plan`).
        case foldIntoTail
        /// A Test request whose push is the one the device's waiting Test job already carries (the Test button
        /// pressed again): nothing is stored, and the request is answered with that job's id at once.
        case sameAsWaitingTest(publicID: String)
    }

    /// The rule. A Test request (`reportsOutcome`) waits only when the device has no other Test waiting and is under
    /// its cap; one that says something else (a certificate-expiry notice has the Test button's shape) is kept as an
    /// alert, counted and folded like one, so no notice is lost and no flood of them grows past the cap.
    static func decide(_ job: NewJob, device: Device, cap: Int) -> Decision {
        if job.reportsOutcome {
            if let test = device.waitingTest {
                if test.payload == job.payload { return .sameAsWaitingTest(publicID: test.publicID) }
            } else if device.live < cap {
                return .store(waits: true)
            }
        }
        return device.live < cap ? .store(waits: false) : .foldIntoTail
    }
}
