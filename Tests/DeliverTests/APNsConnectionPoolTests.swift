import Common
import Deliver
import Foundation
import HTTP2
import Simulator
import Synchronization
import TestSupport
import Testing

/// How the pool counts a closed connection: the count decides reconnect backoff and `allDown`, which opens the
/// outage breaker.
@Suite struct APNsConnectionPoolTests {
    /// What the pool reported at each change: every connection down and failing, connections ready, failures in a
    /// row, and connections not closed.
    struct Seen: Equatable {
        let allDown: Bool
        let ready: Int
        var failures = 0
        var open = 0
    }

    /// Everything each `onChange` saw, in order.
    final class SeenLog: Sendable {
        let entries = Mutex<[Seen]>([])
        var count: Int { entries.withLock { $0.count } }
        func since(_ mark: Int) -> [Seen] { entries.withLock { Array($0[mark...]) } }
    }

    func simulator(_ configure: (inout APNsSimulator.Configuration) -> Void = { _ in }) throws -> APNsSimulator {
        var simConfig = APNsSimulator.Configuration(
            certificateFile: TLSFixtures.path("server.pem"), privateKeyFile: TLSFixtures.path("server.key"),
            tokenKeyFile: TLSFixtures.signingPublicKey)
        simConfig.port = 0
        configure(&simConfig)
        return try APNsSimulator(simConfig)
    }

    /// A started pool of two connections to `simulator`.
    func twoConnections(to simulator: APNsSimulator) throws -> APNsConnectionPool {
        let pool = APNsConnectionPool(
            configuration: HTTP2ClientConnection.Configuration(host: "127.0.0.1", port: simulator.port), connections: 2,
            tls: try TLSContext.client(extraCAFile: TLSFixtures.caFile), logger: Logger(label: "test", level: .error),
            onChange: {})
        pool.start()
        return pool
    }

    /// One connection to a fresh simulator; returns the pool and what each `onChange` saw.
    func pool(stableAfter: Duration) throws -> (APNsConnectionPool, APNsSimulator, SeenLog) {
        let simulator = try simulator()
        let seen = SeenLog()
        let current = Mutex<APNsConnectionPool?>(nil)
        let pool = APNsConnectionPool(
            configuration: HTTP2ClientConnection.Configuration(host: "127.0.0.1", port: simulator.port), connections: 1,
            tls: try TLSContext.client(extraCAFile: TLSFixtures.caFile), logger: Logger(label: "test", level: .error),
            stableAfter: stableAfter,
            onChange: {
                guard let pool = current.withLock({ $0 }) else { return }
                let now = Seen(
                    allDown: pool.allDown, ready: pool.readyConnections, failures: pool.consecutiveFailures, open: pool.connectionCount)
                seen.entries.withLock { $0.append(now) }
            })
        current.withLock { $0 = pool }
        pool.start()
        return (pool, simulator, seen)
    }

    /// Drops the connection once it is up; returns what the pool reported from the drop until it was up again.
    func dropAndReconnect(_ pool: APNsConnectionPool, _ simulator: APNsSimulator, _ seen: SeenLog) -> [Seen] {
        #expect(waitUntil { pool.readyConnections == 1 })
        let mark = seen.count
        simulator.dropAllConnections()
        #expect(
            waitUntil {
                let after = seen.since(mark)
                guard let down = after.firstIndex(where: { $0.ready == 0 }) else { return false }
                return after[down...].contains { $0.ready == 1 }
            }, "the close was seen, then the connection was up again")
        return seen.since(mark)
    }

    /// APNs closes connections it has served (idle ones, a network blip): not a failure. Every close counted as
    /// one, so with all connections closing together the pool reported them all down and failing, and the outage
    /// breaker opened.
    @Test func aConnectionThatWasUpAndClosesIsNotAFailure() throws {
        let (pool, simulator, seen) = try pool(stableAfter: .zero)
        defer {
            pool.shutdown()
            simulator.stop()
        }
        let after = dropAndReconnect(pool, simulator, seen)
        #expect(!after.contains { $0.allDown }, "\(after)")
        #expect(pool.consecutiveFailures == 0)
    }

    /// One that falls right after coming up counts as a failure, and the count goes on across such falls, so the
    /// backoff doubles: a server that accepts and drops must not get a reconnect a second, forever.
    @Test func connectionsThatFallRightAfterComingUpAreFailuresInARow() throws {
        let (pool, simulator, seen) = try pool(stableAfter: .seconds(3600))
        defer {
            pool.shutdown()
            simulator.stop()
        }
        let first = dropAndReconnect(pool, simulator, seen)
        #expect(first.contains { $0.allDown }, "\(first)")
        _ = dropAndReconnect(pool, simulator, seen)
        #expect(pool.consecutiveFailures == 2, "the second fall is the second failure in a row")
    }

    /// The same for a GOAWAY right after the connection came up (a server shutting down, a proxy turning clients
    /// away): it was replaced at once, however often it came, and never counted — a reconnect every handshake,
    /// which APNs takes for an attack. The GOAWAY and the close after it are one failure, not two.
    @Test func goAwaysRightAfterComingUpAreFailuresInARowToo() throws {
        let (pool, simulator, seen) = try pool(stableAfter: .seconds(3600))
        defer {
            pool.shutdown()
            simulator.stop()
        }
        for expected in 1...2 {
            // Right after the client is up, possibly before the server has read its Finished: the server keeps a
            // GOAWAY asked before its HTTP/2 session exists (HTTP2ConnectionTests), so no wait for the server's side.
            #expect(waitUntil { pool.readyConnections == 1 })
            let mark = seen.count
            simulator.goAwayAll()
            // Read from what each event left, not polled: the closed connection's replacement (after the backoff)
            // would end the state this looks for, and a test thread slower than the backoff would miss it.
            #expect(
                waitUntil { seen.since(mark).contains { $0.failures == expected && $0.open == 0 } },
                "GOAWAY \(expected): counted once, closed, not replaced at once: \(seen.since(mark))")
            #expect(!seen.since(mark).contains { $0.failures > expected }, "the GOAWAY and its close are one failure")
        }
        #expect(waitUntil { pool.readyConnections == 1 }, "replaced after the backoff")
        #expect(pool.consecutiveFailures == 2)
    }

    /// The other environment's pool closes once idle for `idleTimeout`, and opens again on the next use.
    @Test func theOtherEnvironmentsPoolClosesWhenIdleAndOpensAgain() throws {
        let simulator = try simulator()
        defer { simulator.stop() }
        let tls = try TLSContext.client(extraCAFile: TLSFixtures.caFile)
        let opened = Mutex<[APNsConnectionPool]>([])
        let other = OtherAPNsEnvironment(environment: .sandbox, idleTimeout: .zero) {
            let pool = APNsConnectionPool(
                configuration: HTTP2ClientConnection.Configuration(host: "127.0.0.1", port: simulator.port), connections: 1,
                tls: tls, logger: Logger(label: "test", level: .error), onChange: {})
            pool.start()
            opened.withLock { $0.append(pool) }
            return pool
        }
        defer { other.shutdown() }
        let pool = other.pool()
        #expect(waitUntil { pool.readyConnections == 1 })
        other.closeIfIdle()
        #expect(!other.isOpen)
        #expect(waitUntil { pool.connectionCount == 0 }, "its connection closed")
        #expect(other.pool() !== pool && opened.withLock { $0.count } == 2, "a new pool on the next use")
    }

    /// A client may open 2^30 streams on a connection (odd ids up to 2^31 − 1); after that nghttp2 refuses every
    /// request on it. At 5,000 pushes a second on one connection that is two and a half days: the connection must be
    /// replaced, not kept — refusing instantly, it looked the least busy and drew every push.
    @Test func aConnectionWhoseStreamIDsAreUsedUpIsReplaced() throws {
        let (pool, simulator, _) = try pool(stableAfter: .seconds(1))
        defer {
            pool.shutdown()
            simulator.stop()
        }
        #expect(waitUntil { pool.freeStreams > 0 })
        let worn = try #require(pool.pick())
        worn.setNextStreamID(Int32.max - 2)  // two ids left: 2^31 − 3 and 2^31 − 1
        func send() -> Result<HTTP2Response, HTTP2Failure>? {
            guard waitUntil(timeout: .seconds(5), { pool.pick() != nil }), let connection = pool.pick() else { return nil }
            let answer = Mutex<Result<HTTP2Response, HTTP2Failure>?>(nil)
            connection.send(HTTP2Request(path: "/3/device/\(String(repeating: "ab", count: 32))")) { result in
                answer.withLock { $0 = result }
            }
            _ = waitUntil { answer.withLock { $0 } != nil }
            return answer.withLock { $0 }
        }
        var answered = 0
        var refused = 0
        for _ in 0..<8 {
            switch send() {
            case .success: answered += 1
            case .failure(.refused): refused += 1
            default: break
            }
        }
        #expect(refused == 1, "only the request that found the ids used up")
        #expect(answered == 7, "the rest on the worn connection's two ids, then on its replacement")
        #expect(pool.pick() !== worn)
    }

    /// A recycled connection leaves its slot and finishes its streams on its own. A pool shut down meanwhile (the
    /// other environment's, closed when idle) must close it too: left out, it outlived the stopped loop with its
    /// socket and session, and its open request was never answered.
    @Test func shuttingDownClosesConnectionsStillFinishingAfterTheyWereReplaced() throws {
        let (pool, simulator, _) = try pool(stableAfter: .seconds(1))
        defer { simulator.stop() }
        simulator.faults.withLock { $0.latencyMillis = 60_000 }
        #expect(waitUntil { pool.readyConnections == 1 && pool.freeStreams >= 1 }, "the connection is up")
        let old = try #require(pool.pick())
        let answer = Mutex<Result<HTTP2Response, HTTP2Failure>?>(nil)
        old.send(HTTP2Request(path: "/3/device/\(String(repeating: "ab", count: 32))")) { result in answer.withLock { $0 = result } }
        #expect(waitUntil { simulator.received.count == 1 }, "the server holds the request")
        pool.recycle(old)
        #expect(waitUntil { pool.pick().map { $0 !== old } ?? false }, "replaced in its slot")
        pool.shutdown()
        #expect(waitUntil(timeout: .seconds(5)) { answer.withLock { $0 } != nil }, "its open request was failed")
        #expect(answer.withLock { $0 } == .failure(.connectionLost("closed by client with requests open")))
        #expect(waitUntil(timeout: .seconds(5)) { old.currentStatus.isClosed })
    }

    /// Requests fill the first connection before the next takes any: one connection busy, not two half busy, is what
    /// made a drain cheaper (docs/performance.md, thirtieth session). The others take what the first has no stream
    /// for. Spread by the most free streams, the second request went to the other connection.
    @Test func requestsFillTheFirstConnectionBeforeTheNext() throws {
        let simulator = try simulator {
            $0.maxConcurrentStreams = 3
            $0.streamLimitFollowsAnswers = false
        }
        simulator.faults.withLock { $0.latencyMillis = 60_000 }  // every request stays in flight
        let pool = try twoConnections(to: simulator)
        defer {
            pool.shutdown()
            simulator.stop()
        }
        #expect(waitUntil { pool.readyConnections == 2 && pool.freeStreams == 6 }, "both connections up, 3 streams each")
        var picked: [HTTP2ClientConnection] = []
        for _ in 0..<4 {
            let connection = try #require(pool.pick())
            picked.append(connection)
            connection.send(HTTP2Request(path: "/3/device/\(String(repeating: "ab", count: 32))")) { _ in }
        }
        #expect(picked[1] === picked[0] && picked[2] === picked[0], "the first connection until its 3 streams are taken")
        #expect(picked[3] !== picked[0], "then the next")
        #expect(pool.freeStreams == 2)
    }

    /// APNs (and the simulator) hold a new connection to one stream until a push on it is accepted. Filled strictly in
    /// order, the second connection never got one and stayed at a single stream: had the first failed or been
    /// lowered after a rejected push, the deliverer had about two streams until a push on the second came back. The
    /// spare takes a push while it is held to one stream with nothing in flight, so both end at full width.
    @Test func aSpareConnectionIsRaisedToFullWidthBeforeItIsNeeded() throws {
        let simulator = try simulator()  // one stream until an accepted push, then 1,000
        let pool = try twoConnections(to: simulator)
        defer {
            pool.shutdown()
            simulator.stop()
        }
        #expect(waitUntil { pool.readyConnections == 2 && pool.freeStreams == 2 }, "both up, one stream each")
        // A push APNs accepts (a rejected one would keep the connection at one stream).
        let key = try ES256.PrivateKey(pem: Array(try Data(contentsOf: URL(fileURLWithPath: TLSFixtures.signingKey))))
        let token = try ProviderTokenSource(key: key, keyID: "KEY1234567", teamID: "TEAM123456", clock: SystemClock()).token().token
        let push = HTTP2Request(
            path: "/3/device/\(String(repeating: "ab", count: 32))",
            headers: [("authorization", "bearer \(token)"), ("apns-topic", "com.example.app"), ("apns-push-type", "alert")],
            body: Array(#"{"aps":{"alert":"up"}}"#.utf8))
        for _ in 0..<4 {
            let connection = try #require(pool.pick())
            let status = Mutex(0)
            let answered = DispatchSemaphore(value: 0)
            connection.send(push) { result in
                status.withLock { $0 = (try? result.get())?.status ?? 0 }
                answered.signal()
            }
            #expect(answered.wait(timeout: .now() + 15) == .success)
            #expect(status.withLock { $0 } == 200)
        }
        #expect(waitUntil { pool.freeStreams == 2_000 }, "both connections raised to 1,000 streams")
    }

    func waitUntil(timeout: Duration = .seconds(20), _ condition: () -> Bool) -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if condition() { return true }
            Thread.sleep(forTimeInterval: 0.005)
        }
        return condition()
    }
}
