import Common
import Foundation

enum HealthcheckCommand: Command {
    static let name = "healthcheck"
    static let summary = "exit 0 when the local process is ready (GET /readyz answers 200)"
    static let help = """
        Usage: kumapush-relay healthcheck [--port N] [--base-path P] [--delivery]

        Asks http://127.0.0.1:PORT/BASE_PATH/readyz (3 s timeout): ready when a webhook would be stored now.
        --delivery asks delivery's readiness instead, on METRICS_ADDR (/readyz of deliver and serve: not stalled,
        not paused, database answering). Exit 0 on 200, else prints why and exits 1. For container HEALTHCHECKs.
        """

    static func run(settings: Settings, arguments: [String]) throws -> Int32 {
        var options = OptionParser(arguments)
        let delivery = options.flag("--delivery")
        try options.finish()
        let (host, port, path): (String, UInt16, String)
        if delivery {
            guard let address = settings.metricsAddress else {
                throw ConfigurationError(variable: "METRICS_ADDR", message: "is off: delivery's readiness is served there")
            }
            (host, port, path) = (loopback(for: address.host), address.port, "/readyz")
        } else {
            (host, port, path) = (loopback(for: settings.host), settings.port, settings.basePath + "/readyz")
        }
        switch probe(host: host, port: port, path: path) {
        case .success(200):
            return ExitCode.ok
        case .success(let status):
            printError("healthcheck failed: \(path) answered \(status)")
        case .failure(let reason):
            printError("healthcheck failed: \(reason)")
        }
        return ExitCode.runtimeError
    }

    /// A wildcard listen address is asked on loopback.
    private static func loopback(for host: String) -> String {
        host == "::" || host == "0.0.0.0" ? "127.0.0.1" : host
    }

    struct Failure: Error, CustomStringConvertible { let description: String }

    /// One plain HTTP/1.1 GET over a socket with a 3-second deadline; returns the status code.
    static func probe(host: String, port: UInt16, path: String) -> Result<Int, Failure> {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var results: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, String(port), &hints, &results) == 0, let address = results else {
            return .failure(Failure(description: "cannot resolve \(host)"))
        }
        defer { freeaddrinfo(results) }
        let fd = socket(address.pointee.ai_family, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return .failure(Failure(description: "socket: \(String(cString: strerror(errno)))")) }
        defer { close(fd) }
        var timeout = timeval(tv_sec: 3, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        guard connect(fd, address.pointee.ai_addr, address.pointee.ai_addrlen) == 0 else {
            return .failure(Failure(description: "cannot connect to \(host):\(port): \(String(cString: strerror(errno)))"))
        }
        let request = Array("GET \(path) HTTP/1.1\r\nHost: \(host):\(port)\r\nConnection: close\r\n\r\n".utf8)
        guard request.withUnsafeBytes({ write(fd, $0.baseAddress, $0.count) }) == request.count else {
            return .failure(Failure(description: "cannot send the request"))
        }
        var buffer = [UInt8](repeating: 0, count: 512)
        let count = read(fd, &buffer, buffer.count)
        guard count > 0 else { return .failure(Failure(description: "no answer within 3 s")) }
        let statusLine = String(decoding: buffer[0..<count], as: UTF8.self).prefix { $0 != "\r" }
        let parts = statusLine.split(separator: " ")
        guard parts.count >= 2, let status = Int(parts[1]) else { return .failure(Failure(description: "not an HTTP answer")) }
        return .success(status)
    }
}
