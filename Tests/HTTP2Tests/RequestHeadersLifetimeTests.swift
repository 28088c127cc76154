import Testing

@testable import HTTP2

/// nghttp2 reads a request's names and values where they lie, when it encodes the HEADERS frame, not when the
/// request is submitted (`HTTP2Session.submitRequest`): the session holds the blocks until then. Requests submitted
/// from a function whose blocks are gone once it returns, with the freed memory taken again before anything is sent,
/// must still arrive with their own headers. (Under the address sanitizer, as `make test` runs this suite, a session
/// that did not hold them fails here with a use after free; without it, with other requests' or the filler's bytes.)
@Suite struct RequestHeadersLifetimeTests {
    @Test func requestsArriveWithTheirOwnHeadersAfterTheSubmitterLetTheirBlocksGo() throws {
        let server = HPACKIndexingTests.Decoded()
        let client = HPACKIndexingTests.Decoded()
        let clientSession = try HTTP2Session(role: .client, delegate: client)
        let serverSession = try HTTP2Session(role: .server, delegate: server)
        func deliver(_ from: HTTP2Session, _ to: HTTP2Session) throws {
            var bytes: [UInt8] = []
            try from.send(into: &bytes)
            try bytes.withUnsafeBytes { try to.receive($0) }
        }
        // Prefaces and SETTINGS both ways, then their acknowledgements: the client may open many streams.
        for _ in 0..<2 {
            try deliver(clientSession, serverSession)
            try deliver(serverSession, clientSession)
        }
        func submit(_ number: Int) throws {
            var pseudo = HTTP2HeaderBlock()
            pseudo.append(":method", "POST")
            pseudo.append(":scheme", "https")
            pseudo.append(":authority", "api.push.apple.com")
            var head = HTTP2HeaderBlock(path: "device-\(number)", prefix: "/3/device/")
            head.append("apns-id", "id-\(number)-" + String(repeating: "x", count: 30), indexing: .never)
            head.append("apns-expiration", decimal: 1_764_806_400 + number, indexing: .uniqueValue)
            // Every other request without a body: its headers are held until its stream closes, not until the body
            // has gone.
            let body = number.isMultiple(of: 2) ? [] : Array("{\"n\":\(number)}".utf8)
            _ = try clientSession.submitRequest(pseudoHeaders: pseudo, request: HTTP2Request(head: head, body: body))
        }
        let count = 40
        for number in 0..<count { try submit(number) }
        // Blocks of the same sizes, allocated and written now: the freed ones' memory, had nothing held it.
        let filler = (0..<(4 * count)).map { [UInt8](repeating: UInt8(ascii: "#"), count: 32 + $0 * 7 % 400) }
        try deliver(clientSession, serverSession)
        #expect(filler.count == 4 * count)

        let decoded = server.headers.keys.sorted().map { server.headers[$0]! }
        #expect(decoded.count == count)
        for (number, headers) in decoded.enumerated() {
            #expect(
                headers == [
                    ":method: POST", ":scheme: https", ":authority: api.push.apple.com", ":path: /3/device/device-\(number)",
                    "apns-id: id-\(number)-" + String(repeating: "x", count: 30), "apns-expiration: \(1_764_806_400 + number)"
                ])
        }
    }
}
