/// Every decision a client connection makes, as one value: where the connection is in its life, which requests
/// have a stream and which wait for one, how many streams the server allows, and which timers are armed.
///
/// Each method is an event (the session came up, SETTINGS arrived, a request was queued, a stream ended, GOAWAY
/// arrived, a timer fired, the owner asked to close, the transport closed) and returns the actions the connection
/// performs, in order: submit these requests, complete these with this result, reset a stream, send PING or GOAWAY,
/// close, arm or cancel a timer, report an event to the owner, publish a new status. It does no I/O and reads no
/// clock (the time comes with the event), so tests drive it without a socket or nghttp2
/// (`ClientConnectionStateTests`), as swift-nio-http2's `ConnectionStateMachine` and Hummingbird's connection
/// manager are. nghttp2 stays the framing engine: stream ids, flow control and HPACK are its business, not this.
///
/// Generic over what a request is and whom its result goes to, so a test can use strings; `ClientCore` uses
/// `HTTP2Request` and the caller's completion.
struct HTTP2ClientConnectionState<Request, Reply> {
    enum Lifecycle: Equatable {
        /// The TCP connect is under way.
        case connecting
        /// TCP is up, the TLS handshake is under way.
        case handshaking
        /// TLS and HTTP/2 are up: requests flow, as many at once as the server allows.
        case ready
        /// No new requests; the connection closes once its streams are answered.
        case draining(DrainCause)
        case closed
    }

    enum DrainCause: Equatable {
        /// The server sent GOAWAY: it closes when drained, sending nothing more of ours.
        case serverGoAway
        /// We close (the owner asked, or the stream ids are used up): our GOAWAY goes out when drained.
        case closeRequested
    }

    /// The connection's timers, one slot each (`TimerSlots` holds them on the loop).
    enum Timer: CaseIterable, Hashable {
        /// TCP and TLS must be up within `connectTimeout`.
        case connect
        /// Set for the earliest request deadline: one timer, not one per stream (a thousand per-stream timers cost
        /// more than the requests, seen in a profile), and not a periodic sweep (that let a request outlive its
        /// timeout by the sweep's period, and a deliverer counts on it being settled by its timeout).
        case deadline
        /// Idle keep-alive: a PING after `idlePingInterval` without traffic.
        case ping
        /// Armed exactly while a PING awaits its ACK.
        case pingDeadline
    }

    /// A request waiting for a stream slot, or handed over to be submitted.
    struct Submission {
        let request: Request
        let reply: Reply
        /// Set when it was queued and kept when it gets its stream, so a request that waited for a slot is not given
        /// its whole timeout again.
        let deadline: ContinuousClock.Instant
    }

    /// What the owner's threads may read (`HTTP2ClientConnection.Status`, except what the owner counts itself).
    struct Snapshot: Equatable {
        var isReady = false
        var isGoingAway = false
        var isClosed = false
        var streamLimit = 1
    }

    enum Action {
        /// Open a stream for this request, then report `streamOpened` or `submitFailed`.
        case submit(Submission)
        case complete(Reply, Result<HTTP2Response, HTTP2Failure>)
        /// RST_STREAM with CANCEL.
        case resetStream(Int32)
        /// Write out what was submitted now, before the actions that follow. Only from events that do not come
        /// from inside nghttp2 (timers, loop tasks): writing is a library call.
        case writeOut
        case sendPing
        case sendGoAway
        /// Send what is queued and close_notify, then close.
        case closeGracefully(reason: String)
        /// Close now; nothing more is sent.
        case closeNow(reason: String)
        /// Close with a TCP reset, so the server stops reading us at once.
        case abort(reason: String)
        case arm(Timer, after: Duration)
        case cancel(Timer)
        case report(HTTP2ClientConnection.Event)
        case publish(Snapshot)
    }

    /// A request's end: whom to tell, and what. The only thing `streamEnded` and `streamClosed` can do, so they return
    /// it without an array: they run once per response, and an `[Action]` of one element was an allocation and a
    /// free on every request (callgrind, nineteenth session).
    struct Completion {
        let reply: Reply
        let result: Result<HTTP2Response, HTTP2Failure>

        /// The same as an action, for callers that collect actions (tests).
        var action: Action { .complete(reply, result) }
    }

    /// An open stream: whom to tell, when it times out, and the response so far.
    private struct Stream {
        let reply: Reply
        let deadline: ContinuousClock.Instant
        var status = 0
        var headers: [String: String] = [:]
        var body: [UInt8] = []
    }

    /// APNs error bodies are tiny; a server streaming megabytes at us is broken or hostile.
    static var maxResponseBody: Int { 1 << 20 }

    let requestTimeout: Duration
    /// A tenth of the timeout: the least a request must have left to be sent (`requestsToSubmit`). Worked out once: a
    /// `Duration` division, asked for every request submitted, cost more than the rest of the decision.
    let leastTimeToSend: Duration
    let connectTimeout: Duration
    let idlePingInterval: Duration
    let pingTimeout: Duration

    private(set) var lifecycle = Lifecycle.connecting
    private var streams: [Int32: Stream] = [:]
    /// Requests waiting for a stream slot, in the order they came. They time out like streams do: a server that
    /// never grants a slot (a limit of 0, one stuck stream) must not hold a request forever.
    private var waiting: [Submission] = []
    /// Handed out by `requestsToSubmit` and not yet reported back: they count against the stream limit.
    private var submitting = 0
    /// The server's SETTINGS_MAX_CONCURRENT_STREAMS (1 until its SETTINGS say otherwise).
    private(set) var streamLimit = 1
    /// The timers armed, one bit each (`Timer.bit`): asked on every request queued, where a `Set`'s hashing cost
    /// more than the rest of the event.
    private var armedBits: UInt8 = 0
    private var lastActivity: ContinuousClock.Instant
    /// It came up once: a connection going away is still ready for the streams it has (`Status.isReady`).
    private var cameUp = false
    private var published = Snapshot()

    init(configuration: HTTP2ClientConnection.Configuration, now: ContinuousClock.Instant) {
        requestTimeout = configuration.requestTimeout
        leastTimeToSend = configuration.requestTimeout / 10
        connectTimeout = configuration.connectTimeout
        idlePingInterval = configuration.idlePingInterval
        pingTimeout = configuration.pingTimeout
        lastActivity = now
    }

    var streamsOpen: Int { streams.count }
    var requestsWaiting: Int { waiting.count }
    var pingOutstanding: Bool { isArmed(.pingDeadline) }
    /// The timers armed now (tests).
    var armed: Set<Timer> { Set(Timer.allCases.filter(isArmed)) }
    private func isArmed(_ timer: Timer) -> Bool { armedBits & timer.bit != 0 }

    /// Requests are taken (they wait until the connection is up); after GOAWAY, a close or the end they are refused.
    var acceptsRequests: Bool {
        switch lifecycle {
        case .connecting, .handshaking, .ready: true
        case .draining, .closed: false
        }
    }

    var snapshot: Snapshot {
        var snapshot = Snapshot(streamLimit: streamLimit)
        switch lifecycle {
        case .connecting, .handshaking: break
        case .ready: snapshot.isReady = true
        case .draining:
            snapshot.isReady = cameUp
            snapshot.isGoingAway = true
        case .closed:
            // Closed says nothing of whether it had gone away: that stays as it was.
            snapshot.isGoingAway = published.isGoingAway
            snapshot.isClosed = true
        }
        return snapshot
    }

    // MARK: Events: the connection's life

    /// The connection object exists and its TCP connect is under way.
    mutating func started() -> [Action] {
        arm(.connect, after: connectTimeout)
    }

    /// TCP is up; TLS begins.
    mutating func connected() {
        if lifecycle == .connecting { lifecycle = .handshaking }
    }

    /// TLS agreed on h2 and the HTTP/2 session exists; `streamLimit` is what the session assumes so far.
    mutating func sessionUp(streamLimit: Int, now: ContinuousClock.Instant) -> [Action] {
        var actions = cancel(.connect)
        // Already draining (a GOAWAY or close that came first) or closed: up too late to take requests.
        guard lifecycle == .connecting || lifecycle == .handshaking else { return actions }
        lifecycle = .ready
        cameUp = true
        self.streamLimit = streamLimit
        lastActivity = now
        publishIfChanged(&actions)
        actions.append(.report(.ready))
        actions += arm(.ping, after: idlePingInterval)
        return actions
    }

    /// The server's SETTINGS arrived (from inside nghttp2: no `writeOut`). Waiting requests go at the next
    /// `requestsToSubmit`. Reported only when the limit changed: `streamLimitChanged` says it did.
    mutating func settingsReceived(streamLimit: Int) -> [Action] {
        guard lifecycle != .closed, streamLimit != self.streamLimit else { return [] }
        self.streamLimit = streamLimit
        var actions: [Action] = []
        publishIfChanged(&actions)
        actions.append(.report(.streamLimitChanged(streamLimit)))
        return actions
    }

    /// GOAWAY arrived (from inside nghttp2). Streams above `lastStreamID` will never be processed and waiting
    /// requests will never go: both fail as refused, to be resent elsewhere. The owner hears `goingAway` once, when
    /// the connection stops taking requests for the server's reason; a second GOAWAY (servers send one with the
    /// highest id, then the real one) or one after our own close refuses what it names and says nothing more.
    mutating func goAwayReceived(lastStreamID: Int32, reason: String) -> [Action] {
        guard lifecycle != .closed else { return [] }
        var actions: [Action] = []
        if acceptsRequests {
            lifecycle = .draining(.serverGoAway)
            publishIfChanged(&actions)
            actions.append(.report(.goingAway(reason: reason)))
        }
        for id in streams.keys.sorted() where id > lastStreamID {
            if let stream = streams.removeValue(forKey: id) { actions.append(.complete(stream.reply, .failure(.refused))) }
        }
        actions += refuseWaiting()
        return actions
    }

    /// The owner asked to close (a loop task). No new requests; with `immediately`, now (requests still open are
    /// aborted), otherwise once the streams in flight are answered. `transportOpen`: HTTP/2 frames still flow (the
    /// transport is neither before TLS nor closing).
    mutating func closeRequested(immediately: Bool, transportOpen: Bool) -> [Action] {
        guard lifecycle != .closed else { return [] }
        lifecycle = .draining(.closeRequested)
        var actions: [Action] = []
        publishIfChanged(&actions)
        actions += refuseWaiting()
        let reason = "closed by client"
        if !transportOpen {
            // Nothing was sent yet, or the transport is closing anyway; with `immediately` not lingering: the owner
            // may stop the loop right after this task, and a linger timer it never runs would keep the socket,
            // session and loop allocated.
            actions.append(immediately ? .closeNow(reason: reason) : .closeGracefully(reason: reason))
        } else if immediately, !streams.isEmpty {
            // Requests still open when the owner wants them gone (a deliverer giving their jobs back at shutdown):
            // abort, so the server stops reading this connection now instead of answering them later, after
            // another worker may have sent the same jobs again.
            actions.append(.abort(reason: "closed by client with requests open"))
        } else if immediately {
            // GOAWAY and close_notify go out now, as far as the socket takes them at once (best effort: nothing is in
            // flight), and the socket closes with them instead of lingering (see above).
            actions += [.sendGoAway, .closeGracefully(reason: reason), .writeOut, .closeNow(reason: reason)]
        } else {
            // `closeIfDrained` closes once the streams in flight are answered.
            actions.append(.writeOut)
        }
        return actions
    }

    /// The transport closed (for any reason; once). Open streams may have been processed: `connectionLost`.
    mutating func transportClosed(reason: String) -> [Action] {
        guard lifecycle != .closed else { return [] }
        lifecycle = .closed
        var actions: [Action] = Timer.allCases.filter(isArmed).map { .cancel($0) }
        armedBits = 0
        publishIfChanged(&actions)
        // Said first, so whoever wakes up on a failed request can already see the reason.
        actions.append(.report(.closed(reason: reason)))
        for id in streams.keys.sorted() {
            actions.append(.complete(streams[id]!.reply, .failure(.connectionLost(reason))))
        }
        streams.removeAll()
        actions += refuseWaiting()
        return actions
    }

    // MARK: Events: requests

    /// A request arrived for this connection; it waits for a stream slot until its deadline.
    mutating func requestQueued(_ request: consuming Request, reply: consuming Reply, now: ContinuousClock.Instant) -> [Action] {
        guard acceptsRequests else { return [.complete(reply, .failure(.refused))] }
        waiting.append(Submission(request: request, reply: reply, deadline: now + requestTimeout))
        // Deadlines follow the order requests came in: a deadline timer already armed is for an earlier one.
        return isArmed(.deadline) ? [] : armDeadline(now: now)
    }

    /// The requests to submit now, as many as the server's limit leaves room for, oldest first. One with less than
    /// `leastTimeToSend` of its timeout left (it waited for a slot that long, or the loop ran late) never goes and
    /// fails as refused: sent, it would rarely be answered in time, and its timeout would spend the push's attempt
    /// and count towards the outage breaker, though it says nothing of the server's health. Refused, it is resent
    /// (or given back, if its lease is too short), its attempt not spent. (A slot freed by one stream's timeout
    /// used to go to the next request, queued a moment later, which then timed out microseconds after it was sent.)
    mutating func requestsToSubmit(now: ContinuousClock.Instant) -> [Action] {
        var actions: [Action] = []
        // A refused request takes no slot, so its slot goes to the next one waiting: round again.
        while lifecycle == .ready, !waiting.isEmpty, streams.count + submitting < streamLimit {
            for next in takeWaiting(streamLimit - streams.count - submitting) {
                if next.deadline - now >= leastTimeToSend {
                    submitting += 1
                    actions.append(.submit(next))
                } else {
                    actions.append(.complete(next.reply, .failure(.refused)))
                }
            }
        }
        return actions
    }

    /// The first `count` waiting requests (or all), oldest first, each handed out once by an iterator that moves it
    /// (a copy was a reference count for each part of a request).
    private mutating func takeWaiting(_ count: Int) -> Moving<Submission> {
        // Taken from the front in one go (removing the first of hundreds waiting, one at a time, moved all the others
        // each time). All of them, the usual case: the array itself, moved, and `waiting` given room as large again
        // for the next burst; fewer: copies of the first ones.
        var taken: [Submission] = []
        if count >= waiting.count {
            swap(&taken, &waiting)
            waiting.reserveCapacity(taken.count)
        } else {
            taken = Array(waiting.prefix(count))
            waiting.removeFirst(count)
        }
        return Moving(taken)
    }

    /// A submission got stream `id`.
    mutating func streamOpened(_ id: Int32, for submission: Submission, now: ContinuousClock.Instant) {
        submitting -= 1
        streams[id] = Stream(reply: submission.reply, deadline: submission.deadline)
        lastActivity = now
    }

    /// nghttp2 refused a submission; never sent, so refused. `streamIDsUsedUp`: this connection can send no more
    /// (2^30 requests): it stops taking requests, its waiting ones go elsewhere, those open finish here, and the owner
    /// is told to replace it, as after a GOAWAY.
    mutating func submitFailed(_ submission: Submission, streamIDsUsedUp: Bool) -> [Action] {
        submitting -= 1
        var actions: [Action] = [.complete(submission.reply, .failure(.refused))]
        guard streamIDsUsedUp, acceptsRequests else { return actions }
        lifecycle = .draining(.closeRequested)
        publishIfChanged(&actions)
        actions.append(.report(.goingAway(reason: "stream ids used up")))
        actions += refuseWaiting()
        return actions
    }

    // The three below change a stream where it lies in the dictionary (`values[index]`): `streams[id]?.status = …`
    // copied the stream out and back, retaining and releasing its reply, headers and body, 1,200 instructions a call
    // on every response (callgrind).

    mutating func statusReceived(_ id: Int32, status: Int) {
        guard let index = streams.index(forKey: id) else { return }
        streams.values[index].status = status
    }

    /// A response header other than `:status` (only on a connection that `keepsResponseHeaders`).
    mutating func headerReceived(_ id: Int32, name: String, value: String) {
        guard let index = streams.index(forKey: id) else { return }
        streams.values[index].headers[name] = value
    }

    /// False: the body would pass `maxResponseBody`; nghttp2 then resets the stream.
    mutating func dataReceived(_ id: Int32, _ bytes: some Collection<UInt8>) -> Bool {
        guard let index = streams.index(forKey: id) else { return true }
        guard streams.values[index].body.count + bytes.count <= Self.maxResponseBody else { return false }
        streams.values[index].body.append(contentsOf: bytes)
        return true
    }

    /// The server finished its response on `id` (nil: no such stream).
    mutating func streamEnded(_ id: Int32, now: ContinuousClock.Instant) -> Completion? {
        lastActivity = now
        guard let stream = streams.removeValue(forKey: id) else { return nil }
        return Completion(
            reply: stream.reply, result: .success(HTTP2Response(status: stream.status, headers: stream.headers, body: stream.body)))
    }

    /// The stream closed without a complete response (after `streamEnded` it is already gone: nil).
    mutating func streamClosed(_ id: Int32, errorCode: UInt32) -> Completion? {
        guard let stream = streams.removeValue(forKey: id) else { return nil }
        let failure: HTTP2Failure = errorCode == Self.refusedStream ? .refused : .reset(errorCode)
        return Completion(reply: stream.reply, result: .failure(failure))
    }

    /// HTTP/2's REFUSED_STREAM (RFC 9113 §7): the server did not process the stream.
    static var refusedStream: UInt32 { 7 }

    /// After each event's work (from `settle()`, outside nghttp2): a draining connection with nothing left closes.
    /// `transportOpen`: frames still flow (a close already under way is not asked for again).
    func closeIfDrained(transportOpen: Bool) -> [Action] {
        guard case .draining(let cause) = lifecycle, streams.isEmpty, waiting.isEmpty, submitting == 0, transportOpen else { return [] }
        switch cause {
        case .closeRequested: return [.sendGoAway, .closeGracefully(reason: "closed by client")]
        case .serverGoAway: return [.closeGracefully(reason: "server sent GOAWAY")]
        }
    }

    // MARK: Events: timers

    mutating func pingAcknowledged(now: ContinuousClock.Instant) -> [Action] {
        lastActivity = now
        return cancel(.pingDeadline)
    }

    /// `timer` fired (its slot is empty again).
    mutating func timerFired(_ timer: Timer, now: ContinuousClock.Instant) -> [Action] {
        guard isArmed(timer) else { return [] }
        armedBits &= ~timer.bit
        guard lifecycle != .closed else { return [] }
        switch timer {
        case .connect:
            // Armed means not up yet: `sessionUp` cancels it, whatever came first.
            return [.closeNow(reason: "connect timed out after \(connectTimeout)")]
        case .deadline:
            return deadlinePassed(now: now)
        case .ping:
            var actions: [Action] = []
            if !isArmed(.pingDeadline), now - lastActivity >= idlePingInterval {
                actions.append(.sendPing)
                actions += arm(.pingDeadline, after: pingTimeout)
            }
            actions += arm(.ping, after: idlePingInterval)
            actions.append(.writeOut)
            return actions
        case .pingDeadline:
            return [.closeNow(reason: "no PING acknowledgement within \(pingTimeout)")]
        }
    }

    /// Streams past their deadline are reset and fail as timed out; waiting requests past theirs were never sent and
    /// fail as refused (a timeout would spend the push's attempt and count towards the outage breaker; a server
    /// lowering its stream limit is not an outage). Then the timer is armed for the next deadline.
    private mutating func deadlinePassed(now: ContinuousClock.Instant) -> [Action] {
        var actions: [Action] = []
        var expired: [Action] = []
        for id in streams.keys.sorted() where streams[id]!.deadline <= now {
            let stream = streams.removeValue(forKey: id)!
            actions.append(.resetStream(id))
            expired.append(.complete(stream.reply, .failure(.timedOut)))
        }
        // The resets are written before the caller hears of the timeouts: it may send the job again at once.
        if !expired.isEmpty { actions.append(.writeOut) }
        actions += expired
        let stale = waiting.prefix { $0.deadline <= now }.count
        actions += waiting.prefix(stale).map { .complete($0.reply, .failure(.refused)) }
        waiting.removeFirst(stale)
        actions += armDeadline(now: now)
        return actions
    }

    /// Arms `.deadline` for the earliest deadline held, or cancels it with none. Deadlines follow the order requests
    /// were queued and every stream was queued before every waiting request: the earliest is among the streams, or
    /// else the first waiting.
    private mutating func armDeadline(now: ContinuousClock.Instant) -> [Action] {
        guard let earliest = streams.values.lazy.map(\.deadline).min() ?? waiting.first?.deadline else { return cancel(.deadline) }
        return arm(.deadline, after: max(.zero, earliest - now))
    }

    // MARK: Helpers

    private mutating func arm(_ timer: Timer, after delay: Duration) -> [Action] {
        armedBits |= timer.bit
        return [.arm(timer, after: delay)]
    }

    private mutating func cancel(_ timer: Timer) -> [Action] {
        guard isArmed(timer) else { return [] }
        armedBits &= ~timer.bit
        return [.cancel(timer)]
    }

    private mutating func refuseWaiting() -> [Action] {
        defer { waiting.removeAll() }
        return waiting.map { .complete($0.reply, .failure(.refused)) }
    }

    private mutating func publishIfChanged(_ actions: inout [Action]) {
        let now = snapshot
        guard now != published else { return }
        published = now
        actions.append(.publish(now))
    }
}

extension HTTP2ClientConnectionState.Timer {
    /// Its bit in `armedBits`.
    fileprivate var bit: UInt8 {
        switch self {
        case .connect: 1
        case .deadline: 2
        case .ping: 4
        case .pingDeadline: 8
        }
    }
}

extension HTTP2ClientConnectionState.Submission: Equatable where Request: Equatable, Reply: Equatable {}
extension HTTP2ClientConnectionState.Action: Equatable where Request: Equatable, Reply: Equatable {}
