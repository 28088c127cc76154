import Common

/// A whole enqueue batch, decided once for both stores: for each job, head or pending, stored or folded into its
/// device's tail past the cap, its badge; and the devices' live counts, a count left high healed.
///
/// Each store reads `DeviceState` for the batch's devices inside its write transaction (SQLite per device in its
/// single writer; PostgreSQL per chunk after locking the devices), then `reads(for:)` says which devices also need
/// their waiting Test job or their tail read, then `plan` decides, and the store applies the `Batch` in its own
/// dialect: heals, monitor states, rows in order (acceptance order), folds into stored tails.
extension EnqueuePlan {
    /// A device as the batch's read found it, before any write.
    struct DeviceState: Sendable, Equatable {
        /// `devices.live_jobs` as stored.
        var storedLive: Int
        /// Whether one of its jobs is its head (available, running or retryable).
        var hasHead: Bool
        /// Its monitors whose last word, within the retention, was "down": the badge counts them.
        var downMonitors: Set<String> = []
        /// Those of `downMonitors` whose row was written within `monitorRefresh` of now: "down" again leaves the row
        /// as it is (`plan`).
        var freshDownMonitors: Set<String> = []
        /// Its newest waiting job that does not report an outcome; read only when `reads(for:)` names the device.
        var tail: StoredTail?
        /// The live job a Test request waits on; read only when `reads(for:)` names the device.
        var waitingTest: WaitingTest?
        /// `devices.digest_sealed_through`: the newest position a digest of this device carried (`DigestCarry`).
        /// A tail at or below it is sealed: never folded into.
        var sealedThrough: Int64 = 0

        /// Its live jobs. Every live job waits behind its device's head, so without a head there is none: a count
        /// left high there (a deliverer older than schema 11 still running through the upgrade, whose finish did not
        /// lower it) heals now, the next time the device is idle.
        var live: Int { hasHead ? storedLive : 0 }
    }

    /// A stored waiting job an alert past the cap may be folded into.
    struct StoredTail: Sendable, Equatable {
        var id: Int64
        /// Its place in the device's queue, compared with the seal (`DigestCarry.Waiting.position`): SQLite's
        /// `device_seq`; by default its id (PostgreSQL).
        var position: Int64
        var folded: FoldedAlerts

        init(id: Int64, position: Int64? = nil, folded: FoldedAlerts) {
            self.id = id
            self.position = position ?? id
            self.folded = folded
        }
    }

    /// A job to insert.
    struct Row: Sendable, Equatable {
        var job: NewJob
        /// The device's head (available); otherwise it waits behind it (pending).
        var isHead: Bool
        /// It reports its outcome to the Test request that posted it (stored with `reports_outcome`).
        var waits: Bool
        /// The device's down monitors as of its last alert.
        var badge: Int
        /// Alerts of the same batch folded into it past the cap.
        var folded = FoldedAlerts()
    }

    /// A stored tail that now carries more alerts: its folded alerts and badge become these, and it lives (and its
    /// push asks APNs to keep it for an offline phone) at least for this batch's JOB_TTL.
    struct TailFold: Sendable, Equatable {
        var id: Int64
        var folded: FoldedAlerts
        var badge: Int
    }

    /// A monitor's new state, for the badge.
    struct MonitorState: Sendable, Hashable {
        var device: String
        var monitor: String
        var down: Bool
    }

    /// What the store writes, and what it answers.
    struct Batch: Sendable, Equatable {
        /// One per job, in order.
        var results: [EnqueueResult] = []
        /// Devices whose stored count was left high (see `DeviceState.live`): set to 0 before the rows are inserted.
        /// What a store that raises the count by the rows it inserts writes (SQLite, `SQLiteStore.apply`).
        var healed: [String] = []
        /// The live count of each device whose count the batch changes, as it leaves it: what a store that writes
        /// the count whole writes (PostgreSQL).
        var liveCounts: [String: Int] = [:]
        /// The last state of each monitor the batch reported, one entry a monitor.
        var monitorStates: [MonitorState] = []
        var rows: [Row] = []
        var tailFolds: [TailFold] = []
        /// Devices whose tail took an alert, with the badge it left: the store gives the device's Test job, if one
        /// waits, that badge too. A Test job is never the tail, so it may go out after the tail with the badge of
        /// an older moment, and the phone would keep that badge.
        var testBadges: [String: Int] = [:]
    }

    /// How long a monitor's stored "down" counts as fresh: a batch that reports it down again within this writes
    /// nothing for it, so a monitor's row is rewritten when its state changes and at most this often while it keeps
    /// reporting the same (Uptime Kuma's resends during an outage). The badge counts a monitor heard of within the
    /// retention (TOMBSTONE_RETENTION), so one kept down by resends alone is forgotten up to this long before the
    /// retention has passed since its last report: 10 minutes, or a hundredth of the retention when that is shorter.
    static func monitorRefresh(retention: Duration) -> Duration {
        min(.seconds(600), retention / 100)
    }

    /// The devices whose waiting Test job, and those whose tail, the store must read before `plan`: a Test request
    /// for a device with a head may find one waiting; jobs that may take a device past its cap may fold.
    static func reads(for jobs: some Collection<NewJob>, devices: [String: DeviceState], cap: Int) -> (
        waitingTests: Set<String>, tails: Set<String>
    ) {
        var waitingTests: Set<String> = []
        var jobCount = 0
        for job in jobs {
            jobCount += 1
            if job.reportsOutcome, devices[job.deviceID]?.hasHead == true { waitingTests.insert(job.deviceID) }
        }
        // The usual batch: even the fullest device stays within its cap were every job its own, so no tail is read
        // and the jobs need no counting by device (a hash each, on the writer's commit path).
        guard cap < .max, let fullest = devices.values.lazy.map(\.live).max(), fullest + jobCount > cap else {
            return (waitingTests, [])
        }
        var arriving: [String: Int] = [:]
        for job in jobs { arriving[job.deviceID, default: 0] += 1 }
        let tails = arriving.filter { device, count in devices[device].map { $0.live + count > cap } ?? false }
        return (waitingTests, Set(tails.keys))
    }

    /// A device as the batch leaves it so far.
    private struct Working {
        var storedLive: Int
        /// Its stored count was left high (see `DeviceState.live`).
        var healed: Bool
        var live: Int
        var hasHead: Bool
        var downMonitors: Set<String>
        /// `DeviceState.freshDownMonitors`, as read.
        var freshDownMonitors: Set<String>
        /// Monitor reports this batch has made to it so far.
        var monitorReports = 0
        var tail: Tail?
        var waitingTest: WaitingTest?
        var sealedThrough: Int64

        /// Its tail went out with a digest still in flight or to be retried (`DigestCarry`): folding an alert into
        /// it would send the alerts the digest showed again. A row of this batch is never sealed.
        var tailIsSealed: Bool {
            if case .stored(let stored) = tail { stored.position <= sealedThrough } else { false }
        }
    }

    private enum Tail {
        case stored(StoredTail)
        case row(Int)
    }

    /// The batch as its jobs are decided one after another.
    private struct Planner {
        let cap: Int
        var batch = Batch()
        /// Every monitor report in order, with whether the device's row already held it fresh (`monitorRefresh`).
        var monitors: [(state: MonitorState, alreadyStored: Bool)] = []
        /// Some device had two monitor reports or more: only then can a monitor's report repeat.
        var reportsRepeat = false
        var folds: [Int64: TailFold] = [:]

        /// Decides `job` against `device` as the jobs before it left it, and leaves it as this job does.
        mutating func add(_ job: NewJob, to device: inout Working) {
            if let monitor = job.monitor {
                let alreadyStored = monitor.isDown && !device.freshDownMonitors.isEmpty && device.freshDownMonitors.contains(monitor.key)
                monitors.append((MonitorState(device: job.deviceID, monitor: monitor.key, down: monitor.isDown), alreadyStored))
                device.monitorReports += 1
                reportsRepeat = reportsRepeat || device.monitorReports > 1
                if monitor.isDown { device.downMonitors.insert(monitor.key) } else { device.downMonitors.remove(monitor.key) }
            }
            let badge = device.downMonitors.count
            switch decide(job, device: Device(live: device.live, waitingTest: device.waitingTest), cap: cap) {
            case .sameAsWaitingTest(let publicID):
                batch.results.append(.sameAsWaitingTest(publicID: publicID))
            case .foldIntoTail:
                // SPEC §2.4: past the cap, the alert folds into the newest waiting job (never a Test-button job).
                guard let event = AlertEvent(jobPayload: job.payload), let tail = device.tail else {
                    batch.results.append(.deviceFull)
                    return
                }
                // Its tail sealed, the alert waits in a new row past the cap, into which the next ones fold. The
                // safety net: a deliverer on ingest's cap never seals the tail (`DigestCarry` leaves it out), one on a
                // larger cap (a misconfiguration) may, and the device then holds its cap plus one job meanwhile.
                guard !device.tailIsSealed else {
                    store(job, waits: false, badge: badge, on: &device)
                    return
                }
                switch tail {
                case .stored(var stored):
                    stored.folded.add(event)
                    device.tail = .stored(stored)
                    folds[stored.id] = TailFold(id: stored.id, folded: stored.folded, badge: badge)
                case .row(let index):
                    batch.rows[index].folded.add(event)
                    batch.rows[index].badge = badge
                }
                batch.testBadges[job.deviceID] = badge
                batch.results.append(.merged)
            case .store(let waits):
                store(job, waits: waits, badge: badge, on: &device)
            }
        }

        /// The last word of each monitor the batch reported, in the order of those last words, less a "down" the
        /// device's row already holds fresh: that row's page stays clean (`monitorRefresh`).
        func lastWords() -> [MonitorState] {
            guard reportsRepeat else { return monitors.compactMap { $0.alreadyStored ? nil : $0.state } }
            struct Monitor: Hashable {
                var device: String
                var monitor: String
            }
            var seen: Set<Monitor> = []
            return monitors.reversed().filter { seen.insert(Monitor(device: $0.state.device, monitor: $0.state.monitor)).inserted }
                .reversed().compactMap { $0.alreadyStored ? nil : $0.state }
        }

        /// A row of its own for `job`: the device's head, or waiting behind it (then its tail, unless a Test
        /// request waits on it).
        private mutating func store(_ job: NewJob, waits: Bool, badge: Int, on device: inout Working) {
            batch.rows.append(Row(job: job, isHead: !device.hasHead, waits: waits, badge: badge))
            if waits {
                device.waitingTest = WaitingTest(publicID: job.publicID, payload: job.payload)
            } else if device.hasHead {
                device.tail = .row(batch.rows.count - 1)
            }
            device.hasHead = true
            device.live += 1
            batch.results.append(waits || !job.reportsOutcome ? .queued : .queuedAsAlert)
        }
    }

    /// The rule for the batch: `decide` for each job against its device as the jobs before it left it.
    static func plan(_ jobs: some Sequence<NewJob>, devices: [String: DeviceState], cap: Int) -> Batch {
        var working = devices.mapValues {
            Working(
                storedLive: $0.storedLive, healed: !$0.hasHead && $0.storedLive != 0, live: $0.live, hasHead: $0.hasHead,
                downMonitors: $0.downMonitors, freshDownMonitors: $0.freshDownMonitors, tail: $0.tail.map(Tail.stored),
                waitingTest: $0.waitingTest, sealedThrough: $0.sealedThrough)
        }
        var planner = Planner(cap: cap)
        planner.batch.results.reserveCapacity(jobs.underestimatedCount)
        planner.batch.rows.reserveCapacity(jobs.underestimatedCount)
        for job in jobs {
            // Changed where it is stored: one lookup a job, and no copy of its monitors.
            guard let slot = working.index(forKey: job.deviceID) else {
                planner.batch.results.append(.deviceGone)
                continue
            }
            planner.add(job, to: &working.values[slot])
        }
        var batch = planner.batch
        batch.monitorStates = planner.lastWords()
        batch.tailFolds = planner.folds.values.sorted { $0.id < $1.id }
        batch.liveCounts.reserveCapacity(working.count)
        for (id, device) in working {
            if device.healed { batch.healed.append(id) }
            if device.live != device.storedLive { batch.liveCounts[id] = device.live }
        }
        batch.healed.sort()
        return batch
    }
}
