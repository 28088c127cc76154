import Common
import Foundation
import Queue

/// Moves a single-host relay onto PostgreSQL (README "Outgrowing one host").
enum MigrateStoreCommand: Command {
    static let name = "migrate-store"
    static let summary = "copy a SQLite database into PostgreSQL (devices, tombstones, queued jobs, dead letters)"
    static let help = """
        Usage: kumapush-relay migrate-store --from PATH --to URL

        Copies everything the relay keeps in the SQLite database at PATH into the PostgreSQL database at URL (a
        libpq URI or key=value string, as DATABASE_URL takes): devices with their ids, so webhook URLs and app
        logins keep working; tombstones; badge states; then queued jobs and dead letters in acceptance order, with
        their ids. A job that was mid-push is due again at once. Stop every relay process first. Rows already in
        the target are skipped, so an interrupted run continues where it stopped when started again. Then set
        DATABASE_URL to URL and start the relay. A progress bar shows on a terminal.
        """

    static let pageSize = 1000

    static func run(settings: Settings, arguments: [String]) throws -> Int32 {
        var options = OptionParser(arguments)
        guard let from = try options.value("--from"), let to = try options.value("--to") else {
            throw UsageError("--from PATH and --to URL are required")
        }
        try options.finish()
        guard FileManager.default.fileExists(atPath: from) else {
            throw StartupError(description: "configuration error: --from \(from): no such file", exitCode: ExitCode.usage)
        }
        guard PostgresStore.isDatabaseURL(to) else {
            throw UsageError("--to takes a postgres:// or postgresql:// URI or a key=value connection string")
        }
        let now = SystemClock().nowMillis()
        let source: SQLiteStore
        let target: PostgresStore
        do {
            source = try SQLiteStore(path: from, now: now)
        } catch {
            throw StartupError(description: "cannot open --from \(from): \(error.message)", exitCode: ExitCode.usage)
        }
        do {
            target = try PostgresStore(url: to, options: postgresOptions(settings), now: now)
        } catch {
            // The URL may hold a password: it is not repeated.
            throw StartupError(
                description: "cannot open --to: \(error.message)", exitCode: error.code == .unavailable ? ExitCode.runtimeError : ExitCode.usage)
        }
        let counts = try source.transferCounts()
        let progress = ProgressBar(total: counts.devices + counts.jobs, label: "migrating")
        var done = 0

        var devicesMoved = 0
        var lastDevice = ""
        while case let page = try source.exportDevices(after: lastDevice, limit: pageSize), let last = page.last {
            devicesMoved += try target.importDevices(page)
            lastDevice = last.device.id
            done += page.count
            progress.update(done)
        }
        let tombstonesMoved = try target.importTombstones(try source.exportTombstones())
        _ = try target.importMonitorStates(try source.exportMonitorStates())

        // Jobs go in id order, each page one transaction: everything up to the highest id here is already moved.
        var lastJob = try target.highestJobID()
        var jobsMoved = 0
        var jobsSeen = 0
        done = counts.devices + (try source.countJobs(through: lastJob))
        while case let page = try source.exportJobs(after: lastJob, limit: pageSize), let last = page.last {
            jobsMoved += try target.importJobs(page)
            jobsSeen += page.count
            lastJob = last.id
            done += page.count
            progress.update(done)
        }
        try target.finishImport()
        progress.finish()
        do {
            try target.analyzeImportedTables()
        } catch {
            // Everything is moved and counted; only the statistics are missing, and autovacuum takes them later.
            let warning = "warning: ANALYZE after the move failed (\(error.message)); autovacuum will take the statistics\n"
            FileHandle.standardError.write(Data(warning.utf8))
        }
        let skipped = jobsSeen - jobsMoved
        print(
            "moved \(devicesMoved) devices (\(counts.devices - devicesMoved) already there), \(tombstonesMoved) tombstones, "
                + "\(jobsMoved) jobs" + (skipped > 0 ? "; skipped \(skipped) jobs (already there, or their device was not moved)" : ""))
        return ExitCode.ok
    }
}
