import Foundation

/// A deliberately small HTTP/1.1 client on a raw socket, so tests control every byte sent (truncated bodies,
/// chunked multipart, invalid UTF-8, oversized bodies) and see exactly what the server answers.
public struct RawHTTPClient: Sendable {
    public struct Response {
        public let status: Int
        public let headers: [String: String]
        public let body: Data
        public var text: String { String(decoding: body, as: UTF8.self) }
        public var json: [String: Any]? { try? JSONSerialization.jsonObject(with: body) as? [String: Any] }
    }

    public enum Failure: Error {
        case connect, timeout
        case malformed(String)
    }

    public let port: UInt16
    public var host = "127.0.0.1"

    public init(port: UInt16) {
        self.port = port
    }

    /// Sends `method path` with `headers` and `body` (Content-Length added unless `chunked`), reads the answer.
    public func send(
        _ method: String, _ path: String, headers: [(String, String)] = [], body: [UInt8] = [], chunked: Bool = false,
        timeout: TimeInterval = 10
    ) throws -> Response {
        var head = "\(method) \(path) HTTP/1.1\r\nHost: \(host):\(port)\r\nConnection: close\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        var payload: [UInt8]
        if chunked {
            head += "Transfer-Encoding: chunked\r\n\r\n"
            payload = Array(head.utf8)
            // Two chunks, as form-data senders stream them.
            let middle = body.count / 2
            for part in [body[..<middle], body[middle...]] where !part.isEmpty {
                payload += Array("\(String(part.count, radix: 16))\r\n".utf8) + part + Array("\r\n".utf8)
            }
            payload += Array("0\r\n\r\n".utf8)
        } else {
            if !body.isEmpty || method == "POST" || method == "PATCH" { head += "Content-Length: \(body.count)\r\n" }
            head += "\r\n"
            payload = Array(head.utf8) + body
        }
        return try exchange(payload, timeout: timeout)
    }

    /// Writes raw bytes and reads until the server closes (requests carry `Connection: close`).
    public func exchange(_ bytes: [UInt8], timeout: TimeInterval = 10) throws -> Response {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Failure.connect }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        inet_pton(AF_INET, host, &address.sin_addr)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { throw Failure.connect }
        var sent = 0
        while sent < bytes.count {
            // MSG_NOSIGNAL: the server may answer (413, a cut request) and close before reading everything; that
            // must end the write with EPIPE, not kill the whole test process with SIGPIPE.
            let n = bytes[sent...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n <= 0 { break }
            sent += n
        }
        var received = Data()
        let deadline = Date().addingTimeInterval(timeout)
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let remaining = Int32(max(0, deadline.timeIntervalSinceNow * 1000))
            guard remaining > 0, poll(&descriptor, 1, remaining) > 0 else { throw Failure.timeout }
            let n = read(fd, &buffer, buffer.count)
            if n <= 0 { break }
            received.append(contentsOf: buffer[0..<n])
        }
        return try Self.parse(received)
    }

    public static func parse(_ data: Data) throws -> Response {
        guard let split = data.range(of: Data("\r\n\r\n".utf8)) else { throw Failure.malformed(String(decoding: data, as: UTF8.self)) }
        let head = String(decoding: data[..<split.lowerBound], as: UTF8.self).components(separatedBy: "\r\n")
        let statusParts = head[0].split(separator: " ")
        guard statusParts.count >= 2, let status = Int(statusParts[1]) else { throw Failure.malformed(head[0]) }
        var headers: [String: String] = [:]
        for line in head.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        var body = Data(data[split.upperBound...])
        if let length = headers["content-length"].flatMap(Int.init) { body = body.prefix(length) }
        return Response(status: status, headers: headers, body: body)
    }
}
