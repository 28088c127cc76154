import Common
import Foundation
import Simulator
import Synchronization

enum APNsSimCommand: Command {
    static let name = "apns-sim"
    static let summary = "a local APNs simulator for development, demos and benchmarks"
    static let help = """
        Usage: kumapush-relay apns-sim --cert PEM --key PEM --token-key PEM [--listen HOST:PORT] [--topic T]
                                       [--latency MS] [--streams N] [--threads N] [--quiet] [--record FILE]

          --cert, --key    TLS certificate chain and private key the simulator serves
          --token-key      public key (or the .p8) that provider tokens must verify against
          --listen         address to listen on (default 127.0.0.1:8443)
          --topic          the only apns-topic accepted (default: any)
          --latency MS     delay every answer (simulated APNs round trip)
          --streams N      SETTINGS_MAX_CONCURRENT_STREAMS once a push was accepted (default 1000); as APNs does,
                           a connection starts at one stream and a rejected push drops it back to one
          --threads N      event-loop threads (default 1)
          --quiet          do not print each push
          --record FILE    append "<apns-id> <status> <microseconds since 1970>" per push (benchmarks)

        Verifies what APNs verifies (path, topic, push type, priority, ids, payload size, ES256 provider token) and
        answers like APNs. Faults on request: POST /sim/faults with JSON {"byToken":{"<token>":{"status":410,
        "reason":"Unregistered"}},"unavailableUntil":<ms>,"goAwayAfter":N,"dropNext":true,"silent":true,
        "latencyMillis":N}; GET /sim/stats. Prints one line per push unless --quiet.
        """

    static func run(settings: Settings, arguments: [String]) throws -> Int32 {
        var options = OptionParser(arguments)
        guard let cert = try options.value("--cert"), let key = try options.value("--key"), let tokenKey = try options.value("--token-key") else {
            throw UsageError("--cert, --key and --token-key are required")
        }
        var configuration = APNsSimulator.Configuration(certificateFile: cert, privateKeyFile: key, tokenKeyFile: tokenKey)
        if let listen = try options.value("--listen") {
            guard let address = ListenAddress(listen) else { throw UsageError("--listen takes HOST:PORT with an IP host") }
            configuration.host = address.host
            configuration.port = address.port
        }
        configuration.topic = try options.value("--topic")
        if let streams = try options.value("--streams") {
            guard let value = UInt32(streams), value > 0 else { throw UsageError("--streams takes a positive number") }
            configuration.maxConcurrentStreams = value
        }
        if let threads = try options.value("--threads") {
            guard let value = Int(threads), value > 0, value <= 64 else { throw UsageError("--threads takes 1 to 64") }
            configuration.threads = value
        }
        let latency = try options.value("--latency").map { text -> Int in
            guard let value = Int(text), value >= 0 else { throw UsageError("--latency takes milliseconds") }
            return value
        }
        let quiet = options.flag("--quiet")
        let record = try options.value("--record")
        try options.finish()

        TerminationSignals.block()
        let logger = Logger(label: "apns-sim", settings: settings)
        let simulator: APNsSimulator
        var recorderToFlush: PushRecorder?
        do {
            let recorder = try record.map { try PushRecorder(path: $0) }
            recorderToFlush = recorder
            let printer: (@Sendable (APNsSimulator.Received) -> Void)? = quiet ? nil : printPush
            simulator = try APNsSimulator(
                configuration,
                onPush: { push in
                    recorder?.record(push)
                    printer?(push)
                })
        } catch {
            throw StartupError(description: "cannot start the simulator: \(error)", exitCode: ExitCode.usage)
        }
        simulator.keepLog(false)
        if let latency { simulator.faults.withLock { $0.latencyMillis = latency } }
        logger.info("APNs simulator listening", ["listen": "\(configuration.host):\(simulator.port)", "topic": configuration.topic ?? "any"])
        _ = TerminationSignals.wait()
        simulator.stop()
        recorderToFlush?.flush()
        return ExitCode.ok
    }
}

/// One line per push, written straight to stdout (no buffering) so a watching person sees it arrive.
/// This is a development tool: it shows what the phone would show.
@Sendable func printPush(_ push: APNsSimulator.Received) {
    let alert = (try? JSONSerialization.jsonObject(with: Data(push.payload)) as? [String: Any])
        .flatMap { ($0["aps"] as? [String: Any])?["alert"] as? [String: Any] }
    let title = alert?["title"] as? String ?? ""
    let body = (alert?["body"] as? String ?? "").replacingOccurrences(of: "\n", with: " ⏎ ")
    let outcome = push.status == 200 ? "200" : "\(push.status) \(push.reason)"
    FileHandle.standardOutput.write(Data("push → \(push.token.prefix(8))… [\(outcome)] \(title): \(body)\n".utf8))
}

/// Arrival times of pushes, for latency measurements. One line per push, buffered, flushed at 64 KiB and on exit.
final class PushRecorder: Sendable {
    private let handle: FileHandle
    private let buffer = Mutex<[UInt8]>([])

    init(path: String) throws {
        _ = FileManager.default.createFile(atPath: path, contents: nil)
        guard let handle = FileHandle(forWritingAtPath: path) else { throw UsageError("--record: cannot write \(path)") }
        self.handle = handle
    }

    func record(_ push: APNsSimulator.Received) {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        let micros = Int64(now.tv_sec) * 1_000_000 + Int64(now.tv_nsec) / 1000
        let line = Array("\(push.apnsID) \(push.status) \(micros)\n".utf8)
        let full = buffer.withLock { buffer -> [UInt8]? in
            buffer += line
            guard buffer.count >= 65_536 else { return nil }
            defer { buffer.removeAll(keepingCapacity: true) }
            return buffer
        }
        if let full { handle.write(Data(full)) }
    }

    func flush() {
        let rest = buffer.withLock { buffer -> [UInt8] in
            defer { buffer.removeAll() }
            return buffer
        }
        handle.write(Data(rest))
    }
}
