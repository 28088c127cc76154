import Testing

@testable import HTTP2

/// Apple's HPACK advice for APNs as a client session follows it: a header whose value is new on every request
/// (`apns-id`, `apns-expiration`) enters the dynamic table once, with the connection's first request, so the
/// requests after it send the name as an index and spell only the value. Checked on the bytes nghttp2 produces and
/// on what a server session decodes from them.
@Suite struct HPACKIndexingTests {
    /// The headers a server session decoded, per stream.
    final class Decoded: HTTP2SessionDelegate {
        var headers: [Int32: [String]] = [:]
        func streamOpened(_ stream: Int32) {}
        func headerReceived(_ stream: Int32, name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) {
            headers[stream, default: []].append(String(decoding: name, as: UTF8.self) + ": " + String(decoding: value, as: UTF8.self))
        }
        func dataReceived(_ stream: Int32, _ bytes: UnsafeRawBufferPointer) -> Bool { true }
        func streamEnded(_ stream: Int32) {}
        func streamClosed(_ stream: Int32, errorCode: UInt32) {}
        func goAwayReceived(lastStreamID: Int32, errorCode: UInt32, debugData: [UInt8]) {}
        func settingsReceived() {}
        func pingAcknowledged() {}
    }

    /// Sends `count` requests, each with a new id and expiry marked `indexing`, from a client session to a server
    /// session; returns the bytes each request took on the wire (its HEADERS frame), the size of the client's HPACK
    /// table after each, and what the server decoded.
    func exchange(_ count: Int, indexing: HTTP2HeaderBlock.Indexing) throws -> (sizes: [Int], tables: [Int], decoded: [[String]]) {
        let client = Decoded()
        let server = Decoded()
        let clientSession = try HTTP2Session(role: .client, delegate: client)
        let serverSession = try HTTP2Session(role: .server, delegate: server)
        func deliver(_ from: HTTP2Session, _ to: HTTP2Session) throws -> Int {
            var bytes: [UInt8] = []
            try from.send(into: &bytes)
            try bytes.withUnsafeBytes { try to.receive($0) }
            return bytes.count
        }
        // Prefaces and SETTINGS both ways, then their acknowledgements: nothing but requests is left to send.
        for _ in 0..<2 {
            _ = try deliver(clientSession, serverSession)
            _ = try deliver(serverSession, clientSession)
        }
        var pseudo = HTTP2HeaderBlock()
        pseudo.append(":method", "POST")
        pseudo.append(":scheme", "https")
        pseudo.append(":authority", "api.push.apple.com")
        var sizes: [Int] = []
        var tables: [Int] = []
        for number in 0..<count {
            var headers = HTTP2HeaderBlock()
            headers.append("apns-topic", "app.example")
            headers.append("apns-expiration", decimal: 1_764_806_400 + number, indexing: indexing)
            headers.append("apns-id", "0f1e2d3c-aaaa-bbbb-cccc-00000000000\(number)", indexing: indexing)
            _ = try clientSession.submitRequest(pseudoHeaders: pseudo, request: HTTP2Request(path: "/3/device/\(number)", headerBlock: headers))
            sizes.append(try deliver(clientSession, serverSession))
            tables.append(clientSession.encoderTableSize)
        }
        return (sizes, tables, server.headers.keys.sorted().map { server.headers[$0]! })
    }

    @Test func aUniqueValuesNameIsSpelledOnlyOnTheFirstRequestOfAConnection() throws {
        let (sizes, tables, decoded) = try exchange(3, indexing: .uniqueValue)
        let (neverSizes, neverTables, neverDecoded) = try exchange(3, indexing: .never)
        // The first request spells everything either way (its fixed headers enter the table too), and the later
        // ones are the same size as each other.
        #expect(sizes[0] == neverSizes[0], "\(sizes) against \(neverSizes)")
        #expect(sizes[1] == sizes[2] && neverSizes[1] == neverSizes[2], "\(sizes) against \(neverSizes)")
        // Never indexed, the later requests spell both names again; indexed once, they send the names as indexes:
        // smaller by about the two names, Huffman-coded ("apns-expiration" and "apns-id" take 16 bytes with their
        // length prefixes). The values, new each time, are never referenced from the table either way.
        #expect(neverSizes[1] - sizes[1] >= 14, "\(sizes) against \(neverSizes)")
        // Only the first request's id and expiry entered the table (32 bytes of overhead each, RFC 7541 §4.1):
        // the later ones, each with its own values, left it as it was (APNs keeps a small table).
        #expect(tables[0] - neverTables[0] == 32 + 15 + 10 + 32 + 7 + 36, "\(tables) against \(neverTables)")
        #expect(tables[1] == tables[0] && tables[2] == tables[0], "\(tables)")
        // The server decodes the same headers either way.
        #expect(decoded == neverDecoded)
        #expect(decoded[2].contains("apns-id: 0f1e2d3c-aaaa-bbbb-cccc-000000000002"))
        #expect(decoded[2].contains("apns-expiration: 1764806402"))
    }
}
