import Common
import Foundation
import Queue
import TestSupport
import Testing

/// The two stores every queue and store test runs against: one conformance suite, one set of semantics.
enum StoreKind: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case sqlite
    case postgres

    var testDescription: String { rawValue }

    /// Where a new, empty database of this kind lives: a file in `directory`, or a fresh database on the test
    /// run's PostgreSQL server (its connection string).
    func freshLocation(in directory: TemporaryDirectory) throws -> String {
        switch self {
        case .sqlite: return directory.path("relay.db")
        case .postgres: return try PostgresServer.shared().createDatabase()
        }
    }

    /// Opens (migrating) the store at `location`, as a relay process would.
    func open(_ location: String, now: Int64, monitorRetention: Duration = .seconds(30 * 86_400)) throws -> any RelayStore {
        switch self {
        case .sqlite: return try SQLiteStore(path: location, options: .init(monitorRetention: monitorRetention), now: now)
        case .postgres: return try PostgresStore(url: location, options: .init(monitorRetention: monitorRetention), now: now)
        }
    }

    /// The versions of the migrations a new database of this kind receives.
    var migrationVersions: [Int] {
        switch self {
        case .sqlite: return SQLiteStore.migrationVersions
        case .postgres: return PostgresStore.migrationVersions
        }
    }

    /// Runs `sql` on a bare connection, past the store, returning every row as text.
    @discardableResult
    func rawQuery(_ location: String, _ sql: String) throws -> [[String]] {
        switch self {
        case .sqlite: return try RawSQLite(path: location).query(sql)
        case .postgres: return try RawPostgres(location).query(sql)
        }
    }
}

/// A fresh store on a real database, plus helpers that keep the tests about behaviour, not set-up.
struct TestDatabase {
    let kind: StoreKind
    let directory = TemporaryDirectory()
    /// The SQLite file or the PostgreSQL connection string, as a relay process or QueueProbe is given it.
    let location: String
    let store: any RelayStore

    /// A fixed "now" the tests move by hand.
    static let t0: Int64 = 1_789_905_600_000

    init(_ kind: StoreKind = .sqlite, monitorRetention: Duration = .seconds(30 * 86_400)) throws {
        self.kind = kind
        location = try kind.freshLocation(in: directory)
        store = try kind.open(location, now: Self.t0, monitorRetention: monitorRetention)
    }

    /// The SQLite store, for the tests of SQLite's own storage settings.
    var sqlite: SQLiteStore { store as! SQLiteStore }
    var path: String { location }

    /// Registers a device with a token derived from `seed`, returning its id.
    @discardableResult
    func device(_ seed: Int) throws -> String {
        let token = String(format: "%064x", seed)
        return try store.registerDevice(
            token: token, authTokenHash: AuthToken.hash("t\(seed)"), now: Self.t0,
            newID: { try DeviceID.generate() }
        ).device.id
    }

    /// Enqueues one job per label for `device`, payload = label.
    func enqueue(_ device: String, _ labels: String..., now: Int64 = t0, ttl: Duration = .seconds(3600)) throws {
        let results = try store.enqueue(
            labels.map { NewJob(deviceID: device, publicID: UUID().uuidString, payload: Array($0.utf8)) },
            now: now, ttl: ttl)
        precondition(results.allSatisfy { $0 == .queued })
    }

    func claim(_ worker: String = "w1", limit: Int = 100, at now: Int64? = nil, lease: Duration = .seconds(60)) throws -> [ClaimedJob] {
        try store.claim(worker: worker, limit: limit, now: now ?? Self.t0, lease: lease)
    }

    /// Every payload of `device`'s live jobs (head first, then those waiting), as labels.
    func liveLabels(_ device: String) throws -> [String] {
        try kind.rawQuery(location, "SELECT payload FROM jobs WHERE device_id = '\(device)' AND state <> 'discarded' ORDER BY id")
            .map { row in kind == .postgres ? String(decoding: Self.hexDecoded(row[0]), as: UTF8.self) : row[0] }
    }

    private static func hexDecoded(_ text: String) -> [UInt8] {
        let digits = Array(text.utf8.dropFirst(2))
        return stride(from: 0, to: digits.count - 1, by: 2).compactMap { UInt8(String(decoding: digits[$0...$0 + 1], as: UTF8.self), radix: 16) }
    }
}

extension ClaimedJob {
    var label: String { String(decoding: payload, as: UTF8.self) }
}

extension JobOutcome {
    static func delivered(_ job: ClaimedJob) -> JobOutcome { JobOutcome(job, kind: .delivered) }
    static func retry(_ job: ClaimedJob, at: Int64, error: String = "InternalServerError") -> JobOutcome {
        JobOutcome(job, kind: .retry(at: at, error: error))
    }
    static func dead(_ job: ClaimedJob, _ reason: String) -> JobOutcome {
        JobOutcome(job, kind: .deadLetter(reason: reason))
    }
}
