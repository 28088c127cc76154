import HTTP2
import Testing

/// The request headers as laid out once for nghttp2: order, lower-cased names, values with their prefix, and which
/// are kept out of the HPACK dynamic table.
@Suite struct HTTP2HeaderBlockTests {
    @Test func keepsOrderLowerCasesNamesAndMarksTheNeverIndexedOnes() {
        var block = HTTP2HeaderBlock()
        block.append("Authorization", "eyJ.token", prefix: "bearer ")
        block.append("apns-id", "0f1e2d3c-aaaa-bbbb-cccc-000000000001", sensitive: true)
        block.append("x-empty", "")
        let fields = block.fields
        #expect(block.count == 3)
        #expect(fields.map(\.name) == ["authorization", "apns-id", "x-empty"])
        #expect(fields.map(\.value) == ["bearer eyJ.token", "0f1e2d3c-aaaa-bbbb-cccc-000000000001", ""])
        #expect(fields.map(\.sensitive) == [false, true, false])
    }

    /// `apns-expiration` is written as digits straight into the block: the same text as `String(number)`.
    @Test(arguments: [0, 9, 10, 1_764_806_400, -1, -42, Int.max, Int.min])
    func aDecimalValueIsWrittenAsStringWouldWriteIt(_ number: Int) {
        var block = HTTP2HeaderBlock()
        block.append("APNs-Expiration", decimal: number, sensitive: true)
        #expect(block.fields.map(\.name) == ["apns-expiration"])
        #expect(block.fields.map(\.value) == [String(number)])
        #expect(block.fields.map(\.sensitive) == [true])
    }

    @Test func aBlockAppendedKeepsItsHeadersAndFlags() {
        var fixed = HTTP2HeaderBlock()
        fixed.append("apns-topic", "t")
        var block = fixed
        block.append("apns-id", "1", sensitive: true)
        var both = HTTP2HeaderBlock()
        both.append(contentsOf: block)
        both.append(contentsOf: fixed)
        #expect(both.count == 3)
        #expect(both.fields.map(\.name) == ["apns-topic", "apns-id", "apns-topic"])
        #expect(both.fields.map(\.sensitive) == [false, true, false])
        #expect(fixed.count == 1, "the block it was copied from is unchanged")
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
        #expect(request.headers.fields.map(\.sensitive) == [true, false])
    }
}
