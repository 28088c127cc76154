import CSQLite
import Foundation
import SQLiteDriver

/// The delivery floor's ceiling: the row changes a claim and a completion make, as bare prepared statements on the
/// relay's own schema, in the relay's batch sizes and transactions, without the store around them.
///
/// Per batch of up to 1,000, in two transactions as the deliverer makes them:
/// - claim: the heads' update (`running`, attempt, lease), returning each job's device and number;
/// - completion: each job deleted, its device's next job promoted (by number, as `promoteNext` does first), and
///   one update per device lowering its live jobs and stamping its last success.
/// What the relay does beyond these — reading each device's token with the claim, building the jobs, checking
/// leases, reporting outcomes, its statement cache — is the distance `floor_cpu_us / floor_bare_cpu_us` measures.
/// `secureDelete` off shows what zeroing deleted rows costs (the product keeps it on: finished jobs held
/// notification content).
struct BareFloor {
    let path: String
    let secureDelete: Bool

    /// CPU µs of this process per job claimed and completed, over `count` jobs.
    func run(count: Int) throws -> Double {
        var db: OpaquePointer?
        guard sqlite3_open(path, &db) == SQLITE_OK else { throw BareFloorFailed(message: "cannot open \(path)") }
        defer { sqlite3_close(db) }
        // The store's connection settings (SQLiteConnection), but for secure_delete where the variant says so.
        try exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA cache_size=-4096")
        try exec(db, "PRAGMA secure_delete=\(secureDelete ? "ON" : "OFF")")
        let claim = try prepare(
            db,
            """
            UPDATE jobs SET state = 'running', attempt = attempt + 1, attempted_at = ?1, attempted_by = 'bare',
                            lease_expires_at = ?1 + 60000
            WHERE id IN (SELECT id FROM jobs WHERE state IN ('available', 'retryable') AND scheduled_at <= ?1
                         ORDER BY scheduled_at LIMIT ?2)
            RETURNING id, device_id, device_seq
            """)
        let delete = try prepare(db, "DELETE FROM jobs WHERE id = ?1")
        let promote = try prepare(db, "UPDATE jobs SET state = 'available' WHERE device_seq = ?1 AND device_id = ?2 AND state = 'pending'")
        let success = try prepare(
            db, "UPDATE devices SET live_jobs = live_jobs - ?1, last_successful_notification = ?2 WHERE id = ?3")
        defer { for statement in [claim, delete, promote, success] { sqlite3_finalize(statement) } }

        let cpuStart = processCPUSeconds()
        var done = 0
        while done < count {
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            try exec(db, "BEGIN IMMEDIATE")
            sqlite3_bind_int64(claim, 1, now)
            sqlite3_bind_int64(claim, 2, Int64(min(1000, count - done)))
            var claimed: [(id: Int64, device: String, number: Int64)] = []
            claimed.reserveCapacity(1000)
            while sqlite3_step(claim) == SQLITE_ROW {
                claimed.append((sqlite3_column_int64(claim, 0), String(cString: sqlite3_column_text(claim, 1)), sqlite3_column_int64(claim, 2)))
            }
            sqlite3_reset(claim)
            try exec(db, "COMMIT")
            if claimed.isEmpty { break }

            try exec(db, "BEGIN IMMEDIATE")
            var perDevice: [String: Int64] = [:]
            for job in claimed {
                sqlite3_bind_int64(delete, 1, job.id)
                try step(db, delete)
                sqlite3_bind_int64(promote, 1, job.number + 1)
                sqlite3_bind_text(promote, 2, job.device, -1, CSQLite_transient())
                try step(db, promote)
                perDevice[job.device, default: 0] += 1
            }
            for (device, ended) in perDevice {
                sqlite3_bind_int64(success, 1, ended)
                sqlite3_bind_int64(success, 2, now)
                sqlite3_bind_text(success, 3, device, -1, CSQLite_transient())
                try step(db, success)
            }
            try exec(db, "COMMIT")
            done += claimed.count
        }
        guard done == count else { throw BareFloorFailed(message: "claimed \(done) of \(count) jobs") }
        return (processCPUSeconds() - cpuStart) / Double(done) * 1e6
    }

    private func exec(_ db: OpaquePointer?, _ sql: String) throws {
        guard sqlite3_exec(db, sql, nil, nil, nil) == SQLITE_OK else { throw BareFloorFailed(message: String(cString: sqlite3_errmsg(db))) }
    }

    private func prepare(_ db: OpaquePointer?, _ sql: String) throws -> OpaquePointer? {
        var statement: OpaquePointer?
        guard sqlite3_prepare_v2(db, sql, -1, &statement, nil) == SQLITE_OK else {
            throw BareFloorFailed(message: String(cString: sqlite3_errmsg(db)))
        }
        return statement
    }

    /// Runs a statement that returns no rows; a failure stops the benchmark (a schema change must not turn the
    /// ceiling into a loop of no-ops).
    private func step(_ db: OpaquePointer?, _ statement: OpaquePointer?) throws {
        guard sqlite3_step(statement) == SQLITE_DONE else { throw BareFloorFailed(message: String(cString: sqlite3_errmsg(db))) }
        sqlite3_reset(statement)
    }
}

struct BareFloorFailed: Error { let message: String }
