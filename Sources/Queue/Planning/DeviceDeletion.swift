/// How a device leaves the relay, decided once for both stores: the app's DELETE (SPEC §2.3), an operator's erase
/// (`device delete`), and APNs saying the token is no longer valid (`JobOutcome.Kind.removeDevice`).
///
/// Each store applies the steps in its own dialect (`DeviceDeletionDialect`: SQLite walks the device's jobs by
/// number, PostgreSQL lets the foreign key's cascade take them); what happens, and in what order, lives only here.
struct DeviceDeletion: Sendable, Equatable {
    /// What a Test request still waiting on one of the device's live jobs is told.
    var report: ReportedOutcome
    /// The reason a tombstone keeps (its webhook URL then answers 410), or nil for none.
    var tombstone: String?
    /// When it happens: the time the outcomes and the tombstone carry.
    var at: Int64

    /// The app deleted its device: no tombstone, as the app said it is gone.
    static func deletedByApp(at: Int64) -> DeviceDeletion {
        DeviceDeletion(report: ReportedOutcome(kind: .failed, reason: "DeviceDeleted"), at: at)
    }

    /// An operator erased the device (a user's erasure request): its webhook URL answers 410 with `reason`.
    static func erased(reason: String, at: Int64) -> DeviceDeletion {
        DeviceDeletion(report: ReportedOutcome(kind: .failed, reason: "DeviceDeleted"), tombstone: reason, at: at)
    }

    /// APNs refused the token for good (`Unregistered`, `BadDeviceToken` in both environments): the waiting Test
    /// request hears APNs' reason, and the webhook URL answers 410 with it.
    static func unregistered(reason: String, at: Int64) -> DeviceDeletion {
        DeviceDeletion(report: ReportedOutcome(kind: .unregistered, reason: reason), tombstone: reason, at: at)
    }

    enum Step: Sendable, Equatable {
        /// Finds the device and holds it against enqueue, finish and replay; a device not found ends the deletion
        /// there, with nothing reported, deleted or tombstoned.
        case lockDevice
        /// Records `report` for each live job a Test request waits on, unless one is recorded already (the head APNs
        /// just answered keeps its own).
        case reportWaitingTests(ReportedOutcome, at: Int64)
        /// Keeps a tombstone with this reason (replacing an older one).
        case recordTombstone(reason: String, at: Int64)
        /// Deletes the device and every job it has, live or dead.
        case deleteDeviceAndJobs
    }

    /// The steps, in order. The waiting Tests are told before their jobs go: otherwise they would be answered
    /// "queued" at `TEST_WAIT` for a push that no longer exists.
    var steps: [Step] {
        [.lockDevice, .reportWaitingTests(report, at: at)] + (tombstone.map { [.recordTombstone(reason: $0, at: at)] } ?? [])
            + [.deleteDeviceAndJobs]
    }

    /// Applies `steps` to `device` in `dialect`, inside the caller's transaction. Returns whether the device was
    /// there (and is now gone).
    func apply<Dialect: DeviceDeletionDialect>(to device: String, in dialect: Dialect) throws -> Bool {
        var deleted = false
        for step in steps {
            switch step {
            case .lockDevice:
                guard try dialect.lockDevice(device) else { return false }
            case .reportWaitingTests(let outcome, let at):
                try dialect.reportWaitingTests(of: device, outcome, at: at)
            case .recordTombstone(let reason, let at):
                try dialect.recordTombstone(of: device, reason: reason, at: at)
            case .deleteDeviceAndJobs:
                deleted = try dialect.deleteDeviceAndJobs(device)
            }
        }
        return deleted
    }
}

/// What a store does for each `DeviceDeletion.Step`, in its own SQL, inside one transaction.
protocol DeviceDeletionDialect {
    /// Whether the device exists, holding it (PostgreSQL locks its row; SQLite's writer holds the database).
    func lockDevice(_ device: String) throws -> Bool
    func reportWaitingTests(of device: String, _ outcome: ReportedOutcome, at: Int64) throws
    func recordTombstone(of device: String, reason: String, at: Int64) throws
    /// Whether a device row was deleted.
    func deleteDeviceAndJobs(_ device: String) throws -> Bool
}
