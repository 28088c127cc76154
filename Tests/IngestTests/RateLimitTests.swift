import Common
import Ingest
import Testing

@Suite struct SlidingWindowLimiterTests {
    let minute = RateLimitRule(limit: 10, window: .seconds(60))

    @Test func allowsUpToTheLimitThenRefusesWithoutCountingRefusals() {
        let limiter = SlidingWindowLimiter(rules: [minute])
        for _ in 0..<10 { #expect(limiter.hit("k", now: 0) == .allowed) }
        // Not 59: when this window ends its ten still weigh fully; a tenth of them has faded 6 s into the next one.
        #expect(limiter.hit("k", now: 1000) == .limited(retryAfterSeconds: 65))
        #expect(limiter.hit("other", now: 1000) == .allowed)
    }

    @Test func thePreviousWindowFadesAsTheWindowSlides() {
        let limiter = SlidingWindowLimiter(rules: [minute])
        for _ in 0..<10 { _ = limiter.hit("k", now: 59_000) }
        // At 60 s the previous window (10 hits) still weighs fully: refused.
        #expect(limiter.hit("k", now: 60_000) != .allowed)
        // Half way through the next window it weighs 5: five more fit, not six.
        for _ in 0..<5 { #expect(limiter.hit("k", now: 90_000) == .allowed) }
        #expect(limiter.hit("k", now: 90_000) != .allowed)
        // Two windows later it is forgotten.
        #expect(limiter.hit("k", now: 180_000) == .allowed)
    }

    /// A client that waits as long as Retry-After says is let through, and one that comes a second sooner is not:
    /// for hits (the registration limit, 5 a minute: a sixth at 20 s was told 40 s, and at 60 s was refused again)
    /// and for checks (the failed-webhook limiter, which counts only failures: at its limit it was told 1 s and
    /// refused until the window ended).
    @Test(arguments: [true, false], [0, 20_000, 59_000] as [Int64])
    func waitingAsLongAsRetryAfterSaysIsEnough(hits: Bool, refusedAt: Int64) throws {
        let limiter = SlidingWindowLimiter(rules: [RateLimitRule(limit: 5, window: .seconds(60))])
        for _ in 0..<5 { hits ? #expect(limiter.hit("ip", now: 0) == .allowed) : limiter.record("ip", now: 0) }
        let ask = { (now: Int64) in hits ? limiter.hit("ip", now: now) : limiter.check("ip", now: now) }
        guard case .limited(let seconds) = ask(refusedAt) else {
            Issue.record("at the limit the next one is refused")
            return
        }
        let retryAt = refusedAt + Int64(seconds) * 1000
        #expect(ask(retryAt - 1000) != .allowed, "told no longer than needed (\(seconds) s)")
        #expect(ask(retryAt) == .allowed, "let through after \(seconds) s")
    }

    @Test func everyRuleMustAllow() {
        let limiter = SlidingWindowLimiter(rules: [RateLimitRule(limit: 5, window: .seconds(60)), RateLimitRule(limit: 6, window: .seconds(3600))])
        for _ in 0..<5 { #expect(limiter.hit("ip", now: 0) == .allowed) }
        #expect(limiter.hit("ip", now: 1) != .allowed)
        #expect(limiter.hit("ip", now: 120_000) == .allowed)
        if case .limited(let seconds) = limiter.hit("ip", now: 120_001) {
            #expect(seconds > 60, "the hourly rule decides now")
        } else {
            Issue.record("the hourly rule must refuse the seventh")
        }
    }

    @Test func checkAndRecordCountOnlyWhatIsRecorded() {
        let limiter = SlidingWindowLimiter(rules: [RateLimitRule(limit: 2, window: .seconds(60))])
        #expect(limiter.check("ip", now: 0) == .allowed)
        limiter.record("ip", now: 0)
        #expect(limiter.check("ip", now: 0) == .allowed)
        limiter.record("ip", now: 0)
        #expect(limiter.check("ip", now: 0) != .allowed)
    }

    @Test func offAllowsEverything() {
        let limiter = SlidingWindowLimiter(rules: [])
        for _ in 0..<1000 { #expect(limiter.hit("k", now: 0) == .allowed) }
        #expect(limiter.isDisabled)
    }

    @Test func aFloodOfNewKeysStaysWithinCapacity() {
        let limiter = SlidingWindowLimiter(rules: [minute], capacity: 100)
        for index in 0..<100_000 { _ = limiter.hit("client-\(index)", now: Int64(index)) }
        #expect(limiter.trackedKeys == 100)
    }

    /// Filling the table is no way to reset a limit: a key at its limit keeps its slot whatever arrives.
    @Test func aLimitedKeyIsNeverEvictedByAFloodOfOthers() {
        let limiter = SlidingWindowLimiter(rules: [minute], capacity: 64)
        for _ in 0..<10 { #expect(limiter.hit("victim", now: 0) == .allowed) }
        for index in 0..<100_000 { _ = limiter.hit("flood-\(index)", now: 1000) }
        #expect(limiter.hit("victim", now: 2000) != .allowed)
        #expect(limiter.check("victim", now: 2000) != .allowed)
    }

    /// Idle and light keys make room first, so a busy client keeps its count while newcomers come and go.
    @Test func idleKeysMakeRoomBeforeBusyOnes() {
        let limiter = SlidingWindowLimiter(rules: [minute], capacity: 32)
        for _ in 0..<9 { _ = limiter.hit("busy", now: 0) }
        for index in 0..<31 { _ = limiter.hit("idle-\(index)", now: 0) }
        for index in 0..<31 { #expect(limiter.hit("late-\(index)", now: 30_000) == .allowed) }
        #expect(limiter.trackedKeys == 32)
        #expect(limiter.hit("busy", now: 30_000) == .allowed, "the tenth event")
        #expect(limiter.hit("busy", now: 30_000) != .allowed, "busy kept its count through the churn")
    }

    /// When every entry is at its limit, newcomers share one overflow count: stricter for them, looser for nobody.
    @Test func newcomersShareOneCountWhenEveryEntryIsLimited() {
        let limiter = SlidingWindowLimiter(rules: [RateLimitRule(limit: 2, window: .seconds(60))], capacity: 4)
        for index in 0..<4 { for _ in 0..<2 { _ = limiter.hit("full-\(index)", now: 0) } }
        #expect(limiter.hit("new-a", now: 0) == .allowed)
        #expect(limiter.hit("new-b", now: 0) == .allowed)
        #expect(limiter.hit("new-c", now: 0) != .allowed)
        #expect(limiter.check("new-d", now: 0) != .allowed)
        for index in 0..<4 { #expect(limiter.hit("full-\(index)", now: 0) != .allowed) }
        #expect(limiter.trackedKeys == 4)
    }
}

@Suite struct ClientKeyTests {
    @Test func ipv6AddressesOfOneSlash64ShareOneKey() {
        let a = Client.limitKey(IPAddress("2001:db8:1:2:aaaa::1")!)
        let b = Client.limitKey(IPAddress("2001:db8:1:2:ffff:ffff:ffff:ffff")!)
        let other = Client.limitKey(IPAddress("2001:db8:1:3::1")!)
        #expect(a == b && a == "2001:db8:1:2::/64")
        #expect(a != other)
        #expect(Client.limitKey(IPAddress("192.0.2.7")!) == "192.0.2.7")
        #expect(Client.limitKey(IPAddress("::ffff:192.0.2.7")!) == "192.0.2.7")
    }

    @Test func theResolverGivesTheAddressForLogsAndTheKeyForLimits() {
        let resolver = ClientAddressResolver(behindProxy: true, headerName: "X-Forwarded-For", trustedProxies: [])
        let request = HTTPRequest(method: "GET", path: "/", headers: ["x-forwarded-for": "2001:db8::5"], peer: .loopbackV4)
        #expect(resolver.client(for: request) == Client(address: "2001:db8::5", limitKey: "2001:db8::/64"))
    }
}

@Suite struct ClientAddressResolverTests {
    func request(peer: String, forwarded: String?) -> HTTPRequest {
        HTTPRequest(method: "GET", path: "/", headers: forwarded.map { ["x-forwarded-for": $0] } ?? [:], peer: IPAddress(peer))
    }

    /// PROXY_HEADER names the header the proxy writes the client into (Cloudflare's `CF-Connecting-IP`, nginx's
    /// `X-Real-IP`): that one is read, whatever its case, and `X-Forwarded-For` is not.
    @Test func theProxyHeaderSettingNamesTheHeaderRead() {
        var settings = Settings()
        settings.behindProxy = true
        settings.proxyHeader = "CF-Connecting-IP"
        let resolver = ClientAddressResolver(settings: settings)
        let request = HTTPRequest(
            method: "GET", path: "/", headers: ["cf-connecting-ip": "203.0.113.9", "x-forwarded-for": "198.51.100.1"],
            peer: IPAddress("127.0.0.1"))
        #expect(resolver.clientAddress(for: request) == "203.0.113.9")
    }

    @Test func withoutProxyModeThePeerIsTheClient() {
        let resolver = ClientAddressResolver(behindProxy: false, headerName: "X-Forwarded-For", trustedProxies: [])
        #expect(resolver.clientAddress(for: request(peer: "127.0.0.1", forwarded: "9.9.9.9")) == "127.0.0.1")
    }

    @Test func behindAProxyTheRightMostUntrustedAddressIsTheClient() {
        let resolver = ClientAddressResolver(behindProxy: true, headerName: "X-Forwarded-For", trustedProxies: [IPNetwork("10.0.0.0/8")!])
        #expect(resolver.clientAddress(for: request(peer: "127.0.0.1", forwarded: "1.2.3.4")) == "1.2.3.4")
        #expect(resolver.clientAddress(for: request(peer: "10.1.1.1", forwarded: "6.6.6.6, 1.2.3.4, 10.0.0.5")) == "1.2.3.4")
        #expect(resolver.clientAddress(for: request(peer: "127.0.0.1", forwarded: "::ffff:1.2.3.4")) == "1.2.3.4")
        // Only trusted peers are believed.
        #expect(resolver.clientAddress(for: request(peer: "8.8.8.8", forwarded: "1.2.3.4")) == "8.8.8.8")
        // A missing header or garbage in the chain falls back to the peer.
        #expect(resolver.clientAddress(for: request(peer: "127.0.0.1", forwarded: nil)) == "127.0.0.1")
        #expect(resolver.clientAddress(for: request(peer: "127.0.0.1", forwarded: "1.2.3.4, garbage")) == "127.0.0.1")
        // Hops written with their port (Azure Application Gateway) are their address.
        #expect(resolver.clientAddress(for: request(peer: "127.0.0.1", forwarded: "203.0.113.7:51234")) == "203.0.113.7")
        #expect(resolver.clientAddress(for: request(peer: "127.0.0.1", forwarded: "1.2.3.4, [2001:db8::5]:443")) == "2001:db8::5")
        #expect(resolver.clientAddress(for: request(peer: "127.0.0.1", forwarded: "[2001:db8::6]")) == "2001:db8::6")
        #expect(resolver.clientAddress(for: request(peer: "127.0.0.1", forwarded: "1.2.3.4:x")) == "127.0.0.1")
        #expect(resolver.clientAddress(for: request(peer: "127.0.0.1", forwarded: "[2001:db8::5]garbage")) == "127.0.0.1")
        // All hops trusted: the left-most is as far as the chain goes.
        #expect(resolver.clientAddress(for: request(peer: "127.0.0.1", forwarded: "10.0.0.9, 10.0.0.5")) == "10.0.0.9")
    }
}
