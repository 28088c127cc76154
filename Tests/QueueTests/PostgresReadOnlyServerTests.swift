import Common
import Foundation
import TestSupport
import Testing

@testable import Queue

/// A server that turns read-only under the relay (a fenced old primary, a standby after a failover) refuses every
/// write with SQLSTATE 25006 on a connection that otherwise stays up. The write link replaces such a connection —
/// at once the first time, so the write runs again on the new one — and no more than about once a second while the
/// server stays read-only. (`test_postgres.py` shows the same with two servers and `target_session_attrs`.)
@Suite struct PostgresReadOnlyServerTests {
    /// With `target_session_attrs=any` in DATABASE_URL (the relay's default, `read-write`, refuses a read-only
    /// server at connect and backs off like any failed connect), the new connections are read-only too.
    @Test func aServerThatStaysReadOnlyIsNotReconnectedToOnEveryWrite() throws {
        let location = try PostgresServer.shared().createDatabase()
        let store = try PostgresStore(url: location + " target_session_attrs=any", now: TestDatabase.t0)
        let device = try store.registerDevice(
            token: String(repeating: "ab", count: 32), authTokenHash: "h", now: TestDatabase.t0, newID: { try DeviceID.generate() }
        ).device.id
        func enqueue(_ label: String) throws {
            let job = NewJob(deviceID: device, publicID: UUID().uuidString.lowercased(), payload: Array(label.utf8))
            _ = try store.enqueue([job], now: TestDatabase.t0, ttl: .seconds(3600))
        }
        try enqueue("before")
        let name = try #require(location.split(separator: " ").first { $0.hasPrefix("dbname=") }?.dropFirst("dbname=".count))
        let admin = try RawPostgres(try PostgresServer.shared().conninfo(database: "postgres"))
        // New sessions of the database are read-only; the store's own are ended, so the ones it opens next are too.
        try admin.execute("ALTER DATABASE \(name) SET default_transaction_read_only = on")
        try admin.execute("SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE datname = '\(name)'")

        let opened = store.writerConnectionsOpened
        let started = ContinuousClock.now
        for attempt in 0..<20 {
            #expect(throws: StoreError.self, "write \(attempt) on a read-only server") { try enqueue("refused") }
        }
        let reconnections = store.writerConnectionsOpened - opened
        // One for the ended connection, one replacing the first read-only one at once, and one more for each full
        // second the loop took (none on a quick host).
        let seconds = Int((ContinuousClock.now - started) / .seconds(1))
        #expect(reconnections >= 2 && reconnections <= 2 + seconds, "\(reconnections) connections for 20 refused writes")

        try admin.execute("ALTER DATABASE \(name) RESET default_transaction_read_only")
        let deadline = ContinuousClock.now + .seconds(10)
        var stored = false
        while !stored && ContinuousClock.now < deadline {
            stored = (try? enqueue("after")) != nil
        }
        #expect(stored, "writes go through once the server takes them again")
        #expect(try RawPostgres(location).query("SELECT convert_from(payload, 'UTF8') FROM jobs ORDER BY id") == [["before"], ["after"]])
    }
}
