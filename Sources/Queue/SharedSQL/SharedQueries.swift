import Common

/// What a store gives the statements both stores share (`SharedQueries+…`): where reads and writes run, and the few
/// things its database does its own way. Each store keeps its own SQL for enqueue, claim and finish, where the
/// databases differ; a rule that is the same statement on both is written once.
protocol SharedQueries {
    associatedtype Connection: QueryConnection
    /// Point lookups, on the connection that does not wait for the writer.
    func read<T: Sendable>(_ body: (Connection) throws -> T) throws(StoreError) -> T
    /// Statements committed together, in one transaction.
    func write<T: Sendable>(_ body: (Connection) throws -> T) throws(StoreError) -> T
    /// One statement, committed on its own (SQLite: a write transaction of one statement; PostgreSQL: no BEGIN).
    func writeStatement<T: Sendable>(_ body: (Connection) throws -> T) throws(StoreError) -> T
    /// Called after a statement committed on its own made jobs due: PostgreSQL wakes deliverers in other processes
    /// (NOTIFY); SQLite's deliverers notice any commit by themselves (`changeCounter`).
    func jobsBecameDue()
    /// The same inside a transaction that makes jobs due: PostgreSQL's NOTIFY goes with its COMMIT.
    func jobsBecameDue(in db: Connection)
    /// `stats()`'s full scans, on a connection of their own: never the one point lookups wait for.
    func withStatsConnection<T: Sendable>(_ body: (Connection) throws -> T) throws(StoreError) -> T

    associatedtype Deletion: DeviceDeletionDialect
    /// `DeviceDeletion`'s steps in the store's SQL, inside the transaction `db` is in.
    func deletion(in db: Connection) -> Deletion
    /// Whether `error` is the database refusing a second device with the same `key`.
    func isDuplicate(_ error: any Error, _ key: DeviceKey) -> Bool

    /// The condition that the job `alias` is its device's head, spelt so that the store finds it through
    /// `jobs_one_head_per_device`.
    static func isHead(_ alias: String) -> String
    /// How a statement that changes a batch of jobs at once begins. SQLite's `UPDATE OR FAIL`: a plain `UPDATE` of
    /// many rows inside a transaction keeps a statement journal (copies of the pages it changes, notification content
    /// included) and spills it to a temporary file past 64 KiB; with `OR FAIL` it needs none, and the transaction
    /// rolls back whole on any error anyway. PostgreSQL has no such clause and keeps no such journal.
    static var batchUpdate: String { get }

    /// A monitor not heard of for this long no longer counts towards a device's badge (TOMBSTONE_RETENTION).
    var monitorRetention: Duration { get }
    /// Before a replay's requeues: what the store needs so that a device's head stays its own while they run
    /// (PostgreSQL locks the devices; SQLite's writer holds the whole database already).
    func prepareReplay(of devices: Set<String>, _ db: Connection)
    /// Stores the dead letter again as a new job of its device, behind every job the device has, unless the device
    /// holds `replay.deviceCap` live jobs or is gone: whether it did.
    func requeue(_ letter: DeadLetterRef, _ replay: DeadLetterReplay, _ db: Connection) throws -> Bool
}

/// The two columns no two devices share.
enum DeviceKey {
    case id
    case token
}
