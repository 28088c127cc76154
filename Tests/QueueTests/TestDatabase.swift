import Common
import Foundation
import Queue
import TestSupport

/// A fresh store on a real file, plus helpers that keep the tests about behaviour, not set-up.
struct TestDatabase {
    let directory = TemporaryDirectory()
    let store: SQLiteStore
    var path: String { directory.path("relay.db") }

    /// A fixed "now" the tests move by hand.
    static let t0: Int64 = 1_789_905_600_000

    init() throws {
        store = try SQLiteStore(path: directory.path("relay.db"), now: Self.t0)
    }

    /// Registers a device with a token derived from `seed`, returning its id.
    @discardableResult
    func device(_ seed: Int) throws -> String {
        let token = String(format: "%064x", seed)
        return try store.registerDevice(token: token, authTokenHash: AuthToken.hash("t\(seed)"), now: Self.t0,
                                        newID: { try DeviceID.generate() }).device.id
    }

    /// Enqueues one job per label for `device`, payload = label.
    func enqueue(_ device: String, _ labels: String..., now: Int64 = t0, ttl: Duration = .seconds(3600)) throws {
        let results = try store.enqueue(labels.map { NewJob(deviceID: device, publicID: UUID().uuidString, payload: Array($0.utf8)) },
                                        now: now, ttl: ttl)
        precondition(results.allSatisfy { $0 == .queued })
    }
}

extension ClaimedJob {
    var label: String { String(decoding: payload, as: UTF8.self) }
}

extension JobOutcome {
    static func delivered(_ job: ClaimedJob) -> JobOutcome { JobOutcome(jobID: job.id, attempt: job.attempt, kind: .delivered) }
    static func retry(_ job: ClaimedJob, at: Int64, error: String = "InternalServerError") -> JobOutcome {
        JobOutcome(jobID: job.id, attempt: job.attempt, kind: .retry(at: at, error: error))
    }
    static func dead(_ job: ClaimedJob, _ reason: String) -> JobOutcome {
        JobOutcome(jobID: job.id, attempt: job.attempt, kind: .deadLetter(reason: reason))
    }
}
