import Testing

@testable import HTTP2

/// The request headers as laid out once for nghttp2: order, lower-cased names, values with their prefix, and which
/// are kept out of the HPACK dynamic table.
@Suite struct HTTP2HeaderBlockTests {
    @Test func keepsOrderLowerCasesNamesAndHowEachIsIndexed() {
        var block = HTTP2HeaderBlock()
        block.append("Authorization", "eyJ.token", prefix: "bearer ")
        block.append("apns-id", "0f1e2d3c-aaaa-bbbb-cccc-000000000001", indexing: .uniqueValue)
        block.append("cookie", "secret", indexing: .never)
        block.append("x-empty", "")
        let fields = block.fields
        #expect(block.count == 4)
        #expect(fields.map(\.name) == ["authorization", "apns-id", "cookie", "x-empty"])
        #expect(fields.map(\.value) == ["bearer eyJ.token", "0f1e2d3c-aaaa-bbbb-cccc-000000000001", "secret", ""])
        #expect(fields.map(\.indexing) == [.indexed, .uniqueValue, .never, .indexed])
    }

    /// `apns-expiration` is written as digits straight into the block: the same text as `String(number)`.
    @Test(arguments: [0, 9, 10, 1_764_806_400, -1, -42, Int.max, Int.min])
    func aDecimalValueIsWrittenAsStringWouldWriteIt(_ number: Int) {
        var block = HTTP2HeaderBlock()
        block.append("APNs-Expiration", decimal: number, indexing: .uniqueValue)
        #expect(block.fields.map(\.name) == ["apns-expiration"])
        #expect(block.fields.map(\.value) == [String(number)])
        #expect(block.fields.map(\.indexing) == [.uniqueValue])
    }

    @Test func aBlockAppendedKeepsItsHeadersAndFlags() {
        var fixed = HTTP2HeaderBlock()
        fixed.append("apns-topic", "t")
        var block = fixed
        block.append("apns-id", "1", indexing: .uniqueValue)
        var both = HTTP2HeaderBlock()
        both.append(contentsOf: block)
        both.append(contentsOf: fixed)
        #expect(both.count == 3)
        #expect(both.fields.map(\.name) == ["apns-topic", "apns-id", "apns-topic"])
        #expect(both.fields.map(\.indexing) == [.indexed, .uniqueValue, .indexed])
        #expect(fixed.count == 1, "the block it was copied from is unchanged")
        // Whether a session must index the block's unique values on its first request goes along too.
        #expect(both.hasUniqueValues && !fixed.hasUniqueValues)
    }

    @Test func valuesLongerThanTwoBytesOfLengthSurvive() {
        let long = String(repeating: "x", count: 70_000)
        var block = HTTP2HeaderBlock()
        block.append("a", long)
        block.append("b", "after")
        #expect(block.fields.map(\.value) == [long, "after"])
    }

    @Test func aRequestBuiltFromPairsMarksItsSensitiveNamesWhateverTheirCase() {
        let request = HTTP2Request(
            path: "/3/device/aa", headers: [("APNs-ID", "1"), ("apns-topic", "t")], sensitiveHeaders: ["apns-id"])
        #expect(request.headers.fields.map(\.name) == ["apns-id", "apns-topic"])
        #expect(request.headers.fields.map(\.indexing) == [.never, .indexed])
    }
}
