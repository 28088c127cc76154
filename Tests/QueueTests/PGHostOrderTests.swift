import Foundation
import PostgresDriver
import TestSupport
import Testing

@testable import Queue

/// After a host vanished silently, a reconnect tries it last (`PGHostOrder`), so the new primary, second in
/// DATABASE_URL, is reached at once instead of after the dead host's `connect_timeout`. The failover drill
/// (`test_failover_drill.py`) measures the effect; these pin down the rewriting of the host list.
@Suite struct PGHostOrderTests {
    @Test func theServerThatFailedGoesLastAndTheOthersKeepTheirOrder() throws {
        let order = try #require(PGHostOrder(conninfo: "postgresql://relay@db1:5001,db2:5002,db3:5003/kumapush?sslmode=disable"))
        let reordered = order.parameters(tryingLast: PGServer(host: "db1", port: "5001"))
        #expect(reordered.map(\.0) == ["host", "port"])
        #expect(reordered.map(\.1) == ["db2,db3,db1", "5002,5003,5001"])
        #expect(order.parameters(tryingLast: PGServer(host: "db2", port: "5002")).map(\.1) == ["db1,db3,db2", "5001,5003,5002"])
    }

    @Test func hostsOnOneAddressAreToldApartByTheirPort() throws {
        let order = try #require(PGHostOrder(conninfo: "postgresql://postgres@127.0.0.1:6001,127.0.0.1:6002/relay"))
        #expect(order.parameters(tryingLast: PGServer(host: "127.0.0.1", port: "6001")).map(\.1) == ["127.0.0.1,127.0.0.1", "6002,6001"])
    }

    @Test func oneSharedPortAndKeyValueConninfoWork() throws {
        let order = try #require(PGHostOrder(conninfo: "host=db1,db2 port=5432 dbname=kumapush"))
        #expect(order.parameters(tryingLast: PGServer(host: "db1", port: "5432")).map(\.1) == ["db2,db1", "5432,5432"])
    }

    @Test func aSingleHostOrAnUnknownServerLeavesTheURLAsWritten() throws {
        #expect(PGHostOrder(conninfo: "postgresql://relay@db1/kumapush") == nil)
        #expect(PGHostOrder(conninfo: "not a conninfo = = =") == nil)
        let order = try #require(PGHostOrder(conninfo: "postgresql://relay@db1,db2/kumapush"))
        #expect(order.parameters(tryingLast: PGServer(host: "db9", port: "5432")).isEmpty)
    }

    /// The link itself: once its connection to the first server is lost, the next connection goes to the second.
    /// One server under two names (its socket folder and a symbolic link to it) stands for two hosts.
    @Test func aLinkThatLostItsServerReconnectsToTheOtherOneFirst() throws {
        let server = try PostgresServer.shared()
        let location = try server.createDatabase()
        let alias = "/tmp/kp-alias-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createSymbolicLink(atPath: alias, withDestinationPath: server.directory)
        defer { try? FileManager.default.removeItem(atPath: alias) }
        let twoHosts = location.replacingOccurrences(of: "host=\(server.directory)", with: "host=\(server.directory),\(alias)")
        let link = try PostgresLink(conninfo: twoHosts, options: PGConnection.Options())
        #expect(try link.connected().server.host == server.directory)

        let name = try #require(location.split(separator: " ").first { $0.hasPrefix("dbname=") }?.dropFirst("dbname=".count))
        try RawPostgres(server.conninfo(database: "postgres")).execute(
            "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE datname = '\(name)'")
        // libpq learns that the connection is gone when it next uses it.
        #expect(throws: PGError.self) { try link.connected().execute("SELECT 1") }
        #expect(try link.connected().server.host == alias)
    }
}
