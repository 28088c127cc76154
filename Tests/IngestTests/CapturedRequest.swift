import Foundation
import Ingest

/// A request captured off the socket from Uptime Kuma's real client (Tests/Fixtures/webhooks/real-*.http, made by
/// capture_real_clients.py): the exact bytes, and the same request as the parser sees it once the server decoded it.
struct CapturedRequest {
    static let placeholder = "DEVICE_ID_HERE"

    let raw: [UInt8]
    let method: String
    let target: String
    let headers: [String: String]
    /// The body after transfer decoding (chunks joined).
    let body: [UInt8]

    init(_ fixture: String) {
        raw = Fixtures.bytes(fixture)
        let split = raw.firstRange(of: Array("\r\n\r\n".utf8))!
        let head = String(decoding: raw[..<split.lowerBound], as: UTF8.self).components(separatedBy: "\r\n")
        let requestLine = head[0].split(separator: " ")
        method = String(requestLine[0])
        target = String(requestLine[1])
        var headers: [String: String] = [:]
        for line in head.dropFirst() {
            let parts = line.split(separator: ":", maxSplits: 1)
            headers[parts[0].lowercased()] = parts[1].trimmingCharacters(in: .whitespaces)
        }
        self.headers = headers
        let rest = Array(raw[split.upperBound...])
        body = headers["transfer-encoding"] == "chunked" ? Self.dechunk(rest) : rest
    }

    /// What `WebhookParser` gets for a body the server does not decode into form fields (JSON, text, GET).
    var parserRequest: HTTPRequest {
        let parts = target.split(separator: "?", maxSplits: 1)
        return HTTPRequest(
            method: method, path: String(parts[0]), rawQuery: parts.count > 1 ? String(parts[1]) : "",
            headers: headers, body: body)
    }

    /// The captured bytes for device `id`, with `Connection: close` so the test client reads the answer to the end.
    func bytes(for id: String) -> [UInt8] {
        var text = raw
        text.replace(Array(Self.placeholder.utf8), with: Array(id.utf8))
        text.replace(Array("Connection: keep-alive".utf8), with: Array("Connection: close".utf8))
        return text
    }

    private static func dechunk(_ bytes: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        var index = 0
        while let lineEnd = bytes[index...].firstRange(of: Array("\r\n".utf8)) {
            let size = Int(String(decoding: bytes[index..<lineEnd.lowerBound], as: UTF8.self), radix: 16)!
            if size == 0 { break }
            out += bytes[lineEnd.upperBound..<(lineEnd.upperBound + size)]
            index = lineEnd.upperBound + size + 2
        }
        return out
    }
}
