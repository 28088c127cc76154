import Testing

@testable import HTTP2

/// The client connection's decisions, driven event by event with no socket, no TLS and no nghttp2: requests and
/// their completions are strings, time is whatever instant the test passes.
@Suite struct ClientConnectionStateTests {
    typealias State = HTTP2ClientConnectionState<String, String>
    typealias Action = State.Action
    typealias Snapshot = State.Snapshot

    let t0 = ContinuousClock.now
    let configuration = HTTP2ClientConnection.Configuration(host: "apns.example", port: 443)

    /// A connection that came up with `limit` streams allowed.
    func ready(limit: Int = 1) -> State {
        var state = State(configuration: configuration, now: t0)
        _ = state.started()
        state.connected()
        _ = state.sessionUp(streamLimit: 1, now: t0)
        if limit != 1 { _ = state.settingsReceived(streamLimit: limit) }
        return state
    }

    /// Submits what the state hands out, giving stream ids 1, 3, 5, … from `firstID`; returns the ids by request.
    @discardableResult
    func submitAll(_ state: inout State, now: ContinuousClock.Instant, firstID: Int32 = 1) -> [String: Int32] {
        var ids: [String: Int32] = [:]
        var next = firstID
        for case .submit(let submission) in state.requestsToSubmit(now: now) {
            state.streamOpened(next, for: submission, now: now)
            ids[submission.request] = next
            next += 2
        }
        return ids
    }

    func completions(_ actions: [Action]) -> [String: Result<HTTP2Response, HTTP2Failure>] {
        var results: [String: Result<HTTP2Response, HTTP2Failure>] = [:]
        for case .complete(let reply, let result) in actions { results[reply] = result }
        return results
    }

    func reports(_ actions: [Action]) -> [HTTP2ClientConnection.Event] {
        actions.compactMap { if case .report(let event) = $0 { event } else { nil } }
    }

    // MARK: Coming up

    @Test func aConnectionComesUpThroughConnectAndHandshakeThenPingsWhenIdle() {
        var state = State(configuration: configuration, now: t0)
        #expect(state.started() == [.arm(.connect, after: .seconds(10))])
        #expect(state.lifecycle == .connecting)
        state.connected()
        #expect(state.lifecycle == .handshaking)
        #expect(state.snapshot == Snapshot())
        #expect(
            state.sessionUp(streamLimit: 1, now: t0) == [
                .cancel(.connect), .publish(Snapshot(isReady: true, streamLimit: 1)), .report(.ready), .arm(.ping, after: .seconds(60))
            ])
        #expect(state.lifecycle == .ready && state.armed == [.ping])
    }

    @Test func theConnectTimeoutClosesOnlyAConnectionNotYetUp() {
        var handshaking = State(configuration: configuration, now: t0)
        _ = handshaking.started()
        handshaking.connected()
        #expect(handshaking.timerFired(.connect, now: t0 + .seconds(10)) == [.closeNow(reason: "connect timed out after 10.0 seconds")])

        var up = ready()
        // A firing that raced with the cancel (the timer was no longer armed) does nothing.
        #expect(up.timerFired(.connect, now: t0 + .seconds(10)) == [])
        #expect(up.lifecycle == .ready)
    }

    // MARK: Streams against the server's limit

    @Test func requestsWaitUntilUpThenGoAsManyAtOnceAsTheServerAllows() {
        var state = State(configuration: configuration, now: t0)
        _ = state.started()
        for name in ["a", "b", "c", "d"] { _ = state.requestQueued(name, reply: name, now: t0) }
        #expect(state.requestsToSubmit(now: t0).isEmpty, "nothing goes before the connection is up")
        _ = state.sessionUp(streamLimit: 1, now: t0)
        #expect(submitAll(&state, now: t0) == ["a": 1], "one stream until the server's SETTINGS say more")
        #expect(
            state.settingsReceived(streamLimit: 3) == [.publish(Snapshot(isReady: true, streamLimit: 3)), .report(.streamLimitChanged(3))])
        #expect(submitAll(&state, now: t0, firstID: 3) == ["b": 3, "c": 5])
        #expect(state.streamsOpen == 3 && state.requestsWaiting == 1)
        // The limit falls below what is open: nothing more goes until streams end under it.
        _ = state.settingsReceived(streamLimit: 2)
        _ = state.streamEnded(1, now: t0)
        #expect(state.requestsToSubmit(now: t0).isEmpty)
        _ = state.streamEnded(3, now: t0)
        #expect(submitAll(&state, now: t0, firstID: 7) == ["d": 7])
    }

    @Test func aSettingsFrameThatChangesNothingIsNotReported() {
        var state = ready(limit: 5)
        #expect(state.settingsReceived(streamLimit: 5) == [])
    }

    /// Requests handed out to be submitted count against the limit until they are reported back.
    @Test func requestsBeingSubmittedCountAgainstTheLimit() {
        var state = ready(limit: 2)
        for name in ["a", "b", "c"] { _ = state.requestQueued(name, reply: name, now: t0) }
        let first = state.requestsToSubmit(now: t0)
        #expect(first.count == 2)
        #expect(state.requestsToSubmit(now: t0).isEmpty, "two are on their way already")
    }

    @Test func aResponseIsAssembledFromItsHeadersAndBody() {
        var state = ready()
        _ = state.requestQueued("a", reply: "done-a", now: t0)
        submitAll(&state, now: t0)
        state.statusReceived(1, status: 400)
        state.headerReceived(1, name: "apns-id", value: "x")
        let firstPart = state.dataReceived(1, Array("{\"reason\":".utf8))
        let secondPart = state.dataReceived(1, Array("\"BadDeviceToken\"}".utf8))
        #expect(firstPart && secondPart)
        let body = Array("{\"reason\":\"BadDeviceToken\"}".utf8)
        #expect(
            state.streamEnded(1, now: t0)?.action == .complete("done-a", .success(HTTP2Response(status: 400, headers: ["apns-id": "x"], body: body))))
        #expect(state.streamClosed(1, errorCode: 0) == nil, "a stream already answered is not completed twice")
    }

    /// `:status` is read from its bytes (`ClientCore.decimal`), never made a String; anything but digits is 0, as
    /// `Int(value) ?? 0` made it before.
    @Test(arguments: [("200", 200), ("410", 410), ("", 0), ("2x0", 0), ("-1", 0), ("1234567890", 0)])
    func theStatusIsReadFromItsDigits(text: String, status: Int) {
        #expect(Array(text.utf8).withUnsafeBytes { ClientCore.decimal($0) } == status)
    }

    @Test func aBodyPastTheLimitIsRefused() {
        var state = ready()
        _ = state.requestQueued("a", reply: "a", now: t0)
        submitAll(&state, now: t0)
        let upToTheLimit = state.dataReceived(1, [UInt8](repeating: 0, count: State.maxResponseBody))
        let pastIt = state.dataReceived(1, [0])
        #expect(upToTheLimit && !pastIt)
    }

    @Test func aStreamClosedUnansweredIsRefusedOnlyForREFUSED_STREAM() {
        var state = ready(limit: 2)
        _ = state.requestQueued("a", reply: "a", now: t0)
        _ = state.requestQueued("b", reply: "b", now: t0)
        submitAll(&state, now: t0)
        #expect(state.streamClosed(1, errorCode: 7)?.action == .complete("a", .failure(.refused)))
        #expect(state.streamClosed(3, errorCode: 2)?.action == .complete("b", .failure(.reset(2))))
    }

    // MARK: GOAWAY

    @Test func goAwayRefusesStreamsAboveItsLastIDAndEveryWaitingRequestThenClosesOnceDrained() {
        var state = ready(limit: 3)
        for name in ["a", "b", "c", "d"] { _ = state.requestQueued(name, reply: name, now: t0) }
        submitAll(&state, now: t0)  // a: 1, b: 3, c: 5; d waits
        let actions = state.goAwayReceived(lastStreamID: 3, reason: "{\"reason\":\"Shutdown\"}")
        #expect(reports(actions) == [.goingAway(reason: "{\"reason\":\"Shutdown\"}")])
        #expect(actions.contains(.publish(Snapshot(isReady: true, isGoingAway: true, streamLimit: 3))))
        #expect(completions(actions) == ["c": .failure(.refused), "d": .failure(.refused)])
        #expect(state.lifecycle == .draining(.serverGoAway))
        #expect(state.requestQueued("e", reply: "e", now: t0) == [.complete("e", .failure(.refused))])
        #expect(state.closeIfDrained(transportOpen: true) == [], "streams 1 and 3 are still answered")
        _ = state.streamEnded(1, now: t0)
        _ = state.streamEnded(3, now: t0)
        #expect(state.closeIfDrained(transportOpen: true) == [.closeGracefully(reason: "server sent GOAWAY")])
        #expect(state.closeIfDrained(transportOpen: false) == [], "a close already under way is not asked for again")
    }

    /// Servers shut down with two GOAWAYs (the highest id, then the real last one): the second refuses what it names
    /// and is not reported again.
    @Test func aSecondGoAwayRefusesMoreAndIsNotReportedAgain() {
        var state = ready(limit: 3)
        for name in ["a", "b", "c"] { _ = state.requestQueued(name, reply: name, now: t0) }
        submitAll(&state, now: t0)
        #expect(reports(state.goAwayReceived(lastStreamID: Int32.max, reason: "first")) == [.goingAway(reason: "first")])
        let second = state.goAwayReceived(lastStreamID: 1, reason: "second")
        #expect(second == [.complete("b", .failure(.refused)), .complete("c", .failure(.refused))])
    }

    /// The server side dropped a GOAWAY asked for during the TLS handshake (`ServerCore.goAway`). The client's state
    /// takes both a GOAWAY and a close in any phase: one that comes before the session is up ends the waiting
    /// requests at once and the connection never reports ready.
    @Test func aGoAwayBeforeTheSessionIsUpIsKeptAndTheConnectionNeverBecomesReady() {
        var state = State(configuration: configuration, now: t0)
        _ = state.started()
        state.connected()
        _ = state.requestQueued("a", reply: "a", now: t0)
        let actions = state.goAwayReceived(lastStreamID: 0, reason: "early")
        #expect(completions(actions) == ["a": .failure(.refused)])
        #expect(reports(actions) == [.goingAway(reason: "early")])
        #expect(state.sessionUp(streamLimit: 10, now: t0) == [.cancel(.connect)], "up too late: no ready, no ping")
        #expect(state.snapshot.isReady == false && state.snapshot.isGoingAway)
        #expect(state.closeIfDrained(transportOpen: true) == [.closeGracefully(reason: "server sent GOAWAY")])
    }

    @Test func aCloseAskedForDuringTheHandshakeClosesAtOnce() {
        var state = State(configuration: configuration, now: t0)
        _ = state.started()
        state.connected()
        _ = state.requestQueued("a", reply: "a", now: t0)
        let actions = state.closeRequested(immediately: false, transportOpen: false)
        #expect(completions(actions) == ["a": .failure(.refused)])
        // Before TLS is up there is nothing to send: the transport turns a graceful close into an immediate one.
        #expect(actions.last == .closeGracefully(reason: "closed by client"))
        #expect(reports(actions).isEmpty, "the owner asked; it is not told")
    }

    // MARK: Closing

    @Test func aGracefulCloseWaitsForTheStreamsThenSendsGoAway() {
        var state = ready(limit: 2)
        for name in ["a", "b", "c"] { _ = state.requestQueued(name, reply: name, now: t0) }
        submitAll(&state, now: t0)
        let actions = state.closeRequested(immediately: false, transportOpen: true)
        #expect(
            actions == [
                .publish(Snapshot(isReady: true, isGoingAway: true, streamLimit: 2)), .complete("c", .failure(.refused)), .writeOut
            ])
        _ = state.streamEnded(1, now: t0)
        #expect(state.closeIfDrained(transportOpen: true) == [])
        _ = state.streamEnded(3, now: t0)
        #expect(state.closeIfDrained(transportOpen: true) == [.sendGoAway, .closeGracefully(reason: "closed by client")])
    }

    @Test func anImmediateCloseAbortsOpenStreamsOrSendsGoAwayAndClosesWithoutLingering() {
        var busy = ready()
        _ = busy.requestQueued("a", reply: "a", now: t0)
        submitAll(&busy, now: t0)
        #expect(busy.closeRequested(immediately: true, transportOpen: true).last == .abort(reason: "closed by client with requests open"))

        var idle = ready()
        #expect(
            idle.closeRequested(immediately: true, transportOpen: true).suffix(4) == [
                .sendGoAway, .closeGracefully(reason: "closed by client"), .writeOut, .closeNow(reason: "closed by client")
            ])

        var closing = ready()
        #expect(closing.closeRequested(immediately: true, transportOpen: false).last == .closeNow(reason: "closed by client"))
    }

    /// Our close after the server's GOAWAY: we still send ours when drained (the owner asked), and the owner is not
    /// told of a going away it caused.
    @Test func aCloseAfterTheServersGoAwaySendsOursWhenDrained() {
        var state = ready()
        _ = state.goAwayReceived(lastStreamID: 0, reason: "x")
        #expect(reports(state.closeRequested(immediately: false, transportOpen: true)).isEmpty)
        #expect(state.closeIfDrained(transportOpen: true) == [.sendGoAway, .closeGracefully(reason: "closed by client")])
    }

    @Test func usedUpStreamIDsRetireTheConnectionOnce() {
        var state = ready(limit: 3)
        for name in ["a", "b", "c", "d"] { _ = state.requestQueued(name, reply: name, now: t0) }
        let handedOut = state.requestsToSubmit(now: t0).compactMap { if case .submit(let s) = $0 { s } else { nil } }
        state.streamOpened(1, for: handedOut[0], now: t0)
        let failed = state.submitFailed(handedOut[1], streamIDsUsedUp: true)
        #expect(completions(failed) == ["b": .failure(.refused), "d": .failure(.refused)])
        #expect(reports(failed) == [.goingAway(reason: "stream ids used up")])
        #expect(state.submitFailed(handedOut[2], streamIDsUsedUp: true) == [.complete("c", .failure(.refused))])
        #expect(state.closeIfDrained(transportOpen: true) == [], "stream 1 finishes here first")
        _ = state.streamEnded(1, now: t0)
        #expect(state.closeIfDrained(transportOpen: true) == [.sendGoAway, .closeGracefully(reason: "closed by client")])
    }

    @Test func theEndFailsOpenStreamsAsLostAndWaitingOnesAsRefusedThenIgnoresEverything() {
        var state = ready()
        _ = state.requestQueued("a", reply: "a", now: t0)
        _ = state.requestQueued("b", reply: "b", now: t0)
        submitAll(&state, now: t0)
        _ = state.goAwayReceived(lastStreamID: 1, reason: "bye")
        _ = state.requestQueued("c", reply: "c", now: t0)
        var up = ready()
        _ = up.requestQueued("w", reply: "w", now: t0)
        #expect(
            up.transportClosed(reason: "reset") == [
                .cancel(.deadline), .cancel(.ping), .publish(Snapshot(isClosed: true, streamLimit: 1)),
                .report(.closed(reason: "reset")), .complete("w", .failure(.refused))
            ])
        let actions = state.transportClosed(reason: "connection closed by peer")
        #expect(actions.contains(.publish(Snapshot(isGoingAway: true, isClosed: true, streamLimit: 1))), "it had gone away")
        #expect(completions(actions) == ["a": .failure(.connectionLost("connection closed by peer"))])
        #expect(state.armed.isEmpty && state.lifecycle == .closed)
        #expect(state.transportClosed(reason: "again") == [])
        #expect(state.timerFired(.ping, now: t0 + .seconds(60)) == [])
        #expect(state.goAwayReceived(lastStreamID: 0, reason: "late") == [])
        #expect(state.settingsReceived(streamLimit: 9) == [])
        #expect(state.closeRequested(immediately: true, transportOpen: false) == [])
        #expect(state.requestQueued("d", reply: "d", now: t0) == [.complete("d", .failure(.refused))])
    }

    // MARK: Deadlines

    @Test func oneDeadlineTimerForTheEarliestRequest() {
        var state = ready()
        #expect(state.requestQueued("a", reply: "a", now: t0) == [.arm(.deadline, after: .seconds(30))])
        #expect(state.requestQueued("b", reply: "b", now: t0 + .seconds(1)) == [], "the armed timer is for an earlier deadline")
    }

    /// At a deadline, a stream is reset (written out before its caller hears, who may resend at once) and times out;
    /// a request that never got a stream was never sent and fails as refused; the timer moves to the next deadline.
    @Test func atTheDeadlineStreamsTimeOutAndWaitingRequestsAreRefused() {
        var state = ready()
        _ = state.requestQueued("a", reply: "a", now: t0)
        _ = state.requestQueued("b", reply: "b", now: t0)
        _ = state.requestQueued("c", reply: "c", now: t0 + .seconds(5))
        submitAll(&state, now: t0)  // a: 1; b and c wait (one stream)
        #expect(
            state.timerFired(.deadline, now: t0 + .seconds(30)) == [
                .resetStream(1), .writeOut, .complete("a", .failure(.timedOut)), .complete("b", .failure(.refused)),
                .arm(.deadline, after: .seconds(5))
            ])
        #expect(state.requestsWaiting == 1 && state.streamsOpen == 0)
    }

    /// A request that got its stream late keeps the deadline it got when queued.
    @Test func aRequestKeepsTheDeadlineItGotWhenQueued() {
        var state = ready()
        _ = state.requestQueued("a", reply: "a", now: t0)
        _ = state.requestQueued("b", reply: "b", now: t0 + .seconds(1))
        submitAll(&state, now: t0)
        _ = state.streamEnded(1, now: t0 + .seconds(20))
        submitAll(&state, now: t0 + .seconds(20), firstID: 3)  // b gets stream 3 with 11 s left
        #expect(state.timerFired(.deadline, now: t0 + .seconds(30)) == [.arm(.deadline, after: .seconds(1))])
        #expect(completions(state.timerFired(.deadline, now: t0 + .seconds(31))) == ["b": .failure(.timedOut)])
    }

    @Test func aRequestPastItsDeadlineIsNeverSubmitted() {
        var state = ready()
        _ = state.requestQueued("a", reply: "a", now: t0)
        #expect(state.requestsToSubmit(now: t0 + .seconds(30)) == [.complete("a", .failure(.refused))])
    }

    /// A slot freed by one stream's timeout must not go to a request queued a moment after it: sent with almost
    /// nothing of its timeout left, it would time out too and count towards the outage breaker. Under a tenth
    /// left, it is refused (resent at once); with a tenth or more, it is sent.
    @Test func aRequestWithUnderATenthOfItsTimeoutLeftIsRefusedNotSent() {
        var state = ready()  // 30 s timeout, one stream
        _ = state.requestQueued("a", reply: "a", now: t0)
        _ = state.requestQueued("b", reply: "b", now: t0 + .milliseconds(2))
        _ = state.requestQueued("c", reply: "c", now: t0 + .seconds(3))
        submitAll(&state, now: t0)
        #expect(completions(state.timerFired(.deadline, now: t0 + .seconds(30))) == ["a": .failure(.timedOut)])
        let actions = state.requestsToSubmit(now: t0 + .seconds(30))
        #expect(actions.first == .complete("b", .failure(.refused)))
        let sent = actions.compactMap { if case .submit(let submission) = $0 { submission.request } else { nil } }
        #expect(sent == ["c"], "c, with exactly 3 s (a tenth) left, is sent")
    }

    // MARK: Keep-alive

    @Test func anIdleConnectionIsPingedAndClosedWithoutAnAck() {
        var state = ready()
        let interval = Duration.seconds(60)
        #expect(
            state.timerFired(.ping, now: t0 + interval) == [
                .sendPing, .arm(.pingDeadline, after: .seconds(10)), .arm(.ping, after: interval), .writeOut
            ])
        #expect(state.pingOutstanding)
        #expect(state.timerFired(.ping, now: t0 + interval * 2) == [.arm(.ping, after: interval), .writeOut], "one PING at a time")
        #expect(state.timerFired(.pingDeadline, now: t0 + interval * 2) == [.closeNow(reason: "no PING acknowledgement within 10.0 seconds")])
    }

    @Test func anAckOrTrafficPutsOffThePing() {
        var state = ready()
        _ = state.timerFired(.ping, now: t0 + .seconds(60))
        #expect(state.pingAcknowledged(now: t0 + .seconds(61)) == [.cancel(.pingDeadline)])
        #expect(!state.pingOutstanding)
        #expect(state.timerFired(.ping, now: t0 + .seconds(120)) == [.arm(.ping, after: .seconds(60)), .writeOut], "the ACK was 59 s ago")
        _ = state.requestQueued("a", reply: "a", now: t0 + .seconds(150))
        submitAll(&state, now: t0 + .seconds(150))
        #expect(!state.timerFired(.ping, now: t0 + .seconds(180)).contains(.sendPing), "a request went 30 s ago")
    }

    // MARK: Re-entrancy

    /// What nghttp2's callbacks report (SETTINGS, GOAWAY, a stream's end or close, a PING ACK) must never ask to
    /// write out: writing is a library call, and nghttp2 forbids it from inside its own callbacks (the session traps).
    @Test func eventsFromInsideNghttp2NeverAskToWriteOut() {
        var state = ready(limit: 4)
        for name in ["a", "b", "c", "d", "e", "f"] { _ = state.requestQueued(name, reply: name, now: t0) }
        submitAll(&state, now: t0)  // 1, 3, 5, 7; e and f wait
        _ = state.timerFired(.ping, now: t0 + .seconds(60))
        var fromCallbacks: [Action] = []
        fromCallbacks += state.settingsReceived(streamLimit: 2)
        fromCallbacks += [state.streamEnded(1, now: t0)?.action, state.streamClosed(3, errorCode: 8)?.action].compactMap { $0 }
        fromCallbacks += state.pingAcknowledged(now: t0)
        fromCallbacks += state.goAwayReceived(lastStreamID: 5, reason: "a")
        fromCallbacks += state.goAwayReceived(lastStreamID: 0, reason: "b")
        #expect(fromCallbacks.count > 6, "each event did something: \(fromCallbacks)")
        #expect(!fromCallbacks.contains(.writeOut))
    }
}
