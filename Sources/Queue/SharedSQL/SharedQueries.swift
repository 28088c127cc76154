import Common

/// A row as the statements both stores share read it.
protocol ResultRow {
    func text(_ column: Int32) -> String
    func optionalText(_ column: Int32) -> String?
    func int(_ column: Int32) -> Int
    func int64(_ column: Int32) -> Int64
    func optionalInt64(_ column: Int32) -> Int64?
    func bool(_ column: Int32) -> Bool
}

/// A value bound to a parameter of a statement both stores share.
protocol BoundValue {
    static func text(_ value: String) -> Self
    static func integer(_ value: Int64) -> Self
    static var null: Self { get }
}

extension BoundValue {
    static func optional(_ value: Int64?) -> Self { value.map { .integer($0) } ?? .null }
    static func optional(_ value: String?) -> Self { value.map { .text($0) } ?? .null }
}

/// A connection as the statements both stores share see it. They are written once, with PostgreSQL's numbered,
/// typed placeholders (`$1::text`); SQLite's connection reads them as `?1` (`SQLitePlaceholders`).
protocol QueryConnection {
    associatedtype Row: ResultRow
    associatedtype Value: BoundValue
    /// Runs `sql` with `values` and maps each result row.
    func query<T>(_ sql: String, _ values: [Value], _ map: (Row) throws -> T) throws -> [T]
    /// Runs `sql` with `values` and returns how many rows it changed.
    func change(_ sql: String, _ values: [Value]) throws -> Int
}

/// What a store gives the statements both stores share (`SharedQueries+…`): where reads and writes run. Each store
/// keeps its own SQL for what its database does differently (enqueue, claim, finish, replay and the rest); a rule
/// that is the same statement on both is written once, here.
protocol SharedQueries {
    associatedtype Connection: QueryConnection
    /// Point lookups, on the connection that does not wait for the writer.
    func read<T: Sendable>(_ body: (Connection) throws -> T) throws(StoreError) -> T
    /// Statements committed together, in one transaction.
    func write<T: Sendable>(_ body: (Connection) throws -> T) throws(StoreError) -> T
    /// One statement, committed on its own (SQLite: a write transaction of one statement; PostgreSQL: no BEGIN).
    func writeStatement<T: Sendable>(_ body: (Connection) throws -> T) throws(StoreError) -> T
    /// Called after a committed change made jobs due: PostgreSQL wakes deliverers in other processes (NOTIFY);
    /// SQLite's deliverers notice any commit by themselves (`changeCounter`).
    func jobsBecameDue()
    /// `stats()`'s full scans, on a connection of their own: never the one point lookups wait for.
    func withStatsConnection<T: Sendable>(_ body: (Connection) throws -> T) throws(StoreError) -> T

    associatedtype Deletion: DeviceDeletionDialect
    /// `DeviceDeletion`'s steps in the store's SQL, inside the transaction `db` is in.
    func deletion(in db: Connection) -> Deletion
    /// Whether `error` is the database refusing a second device with the same `key`.
    func isDuplicate(_ error: any Error, _ key: DeviceKey) -> Bool

    /// A monitor not heard of for this long no longer counts towards a device's badge (TOMBSTONE_RETENTION).
    var monitorRetention: Duration { get }
    /// Before a replay's requeues: what the store needs so that a device's head stays its own while they run
    /// (PostgreSQL locks the devices; SQLite's writer holds the whole database already).
    func prepareReplay(of devices: Set<String>, _ db: Connection)
    /// Stores the dead letter again as a new job of its device, behind every job the device has, unless the device
    /// holds `replay.deviceCap` live jobs or is gone: whether it did.
    func requeue(_ letter: DeadLetterRef, _ replay: DeadLetterReplay, _ db: Connection) throws -> Bool
}

/// A dead letter a replay examines.
typealias DeadLetterRef = (id: Int64, device: String)

/// What a replay transaction stores a dead letter again with.
struct DeadLetterReplay {
    /// Due at once.
    let now: Int64
    /// A fresh JOB_TTL.
    let expiresAt: Int64
    /// The badge counts monitors heard of since then (`monitorRetention`).
    let badgeSince: Int64
    /// DEVICE_QUEUE_MAX: a device holding this many live jobs keeps its dead letter (SPEC §4).
    let deviceCap: Int64
}

/// Tests: hold the connection `stats()` scans with, as a scrape under way does (`StatsIsolationTests`).
package protocol StatsConnectionHolder {
    func holdingStatsConnection(_ body: () -> Void) throws(StoreError)
}

/// The two columns no two devices share.
enum DeviceKey {
    case id
    case token
}
