import Testing

@testable import Common

/// The deliverer's direct reading of job payloads: the same event as written, for every field; anything it does
/// not read itself still comes back through the generic JSON parser.
@Suite struct JobPayloadReaderTests {
    static let plain: [AlertEvent] = [
        AlertEvent(kind: .monitor, status: .down, monitorID: 12, monitorName: "API", message: "Request failed with status code 503"),
        AlertEvent(kind: .monitor, status: .up, important: false, monitorID: -3, monitorName: "Ωmega ✓", message: "OK"),
        AlertEvent(kind: .monitor, status: nil, monitorID: 9_223_372_036_854_775, monitorName: "x", message: ""),
        AlertEvent(kind: .monitor, status: .maintenance, monitorName: "no id", message: "m"),
        AlertEvent(kind: .monitor, status: .pending, monitorID: 0, message: "pending"),
        AlertEvent.test("Testing 🚀"),
        AlertEvent(kind: .generic, title: "Backup", message: "finished"),
        AlertEvent(kind: .generic, message: "no title")
    ]

    @Test func readsEveryFieldOfWhatJobPayloadWritesItself() {
        for event in Self.plain {
            #expect(JobPayloadReader.read(event.jobPayload) == event, "\(event)")
            #expect(AlertEvent(jobPayload: event.jobPayload) == event)
        }
    }

    @Test func escapedTextGoesThroughTheJSONParserAndReadsTheSame() {
        let escaped = [
            AlertEvent(kind: .monitor, status: .down, monitorID: 1, monitorName: "say \"hi\"", message: "a\\b"),
            AlertEvent(kind: .generic, title: "tab\there", message: "line\nbreak\u{1}")
        ]
        for event in escaped {
            #expect(JobPayloadReader.read(event.jobPayload) == nil)
            #expect(AlertEvent(jobPayload: event.jobPayload) == event)
        }
    }

    @Test func otherShapesAreLeftToTheJSONParser() {
        let variants = [
            #"{ "k":"test","m":"spaced"}"#, #"{"m":"first","k":"test"}"#, #"{"k":"monitor","s":1,"i":true,"m":"x"}"#,
            #"{"k":"monitor","id":007,"m":"x"}"#, #"{"k":"monitor","id":99999999999999999999,"m":"x"}"#,
            #"{"k":"test","m":"x"} "#, #"{"k":"test","m":"x"}{"#, #"{"k":"nope","m":"x"}"#
        ]
        for text in variants { #expect(JobPayloadReader.read(Array(text.utf8)) == nil, "\(text)") }
        #expect(AlertEvent(jobPayload: Array(#"{"m":"first","k":"test"}"#.utf8)) == .test("first"))
        #expect(AlertEvent(jobPayload: Array(#"{"k":"monitor","s":1,"i":true,"m":"x"}"#.utf8))?.important == true)
        #expect(AlertEvent(jobPayload: Array(#"{"k":"nope","m":"x"}"#.utf8)) == nil)
        #expect(JobPayloadReader.read([0x7b, 0x22, 0x6b, 0x22, 0x3a, 0x22, 0xff, 0x22]) == nil, "invalid UTF-8")
    }

    /// Only all-ASCII text skips validation: anything else must be valid UTF-8, or the reader gives nil (the JSON
    /// parser decides) instead of text with replacement characters in it.
    @Test func invalidUTF8InTextIsNotReadEvenAfterASCII() {
        let valid = Array(#"{"k":"test","m":"ok "#.utf8) + [0xc3, 0xa9] + Array(#""}"#.utf8)
        #expect(JobPayloadReader.read(valid) == .test("ok é"))
        for invalid: [UInt8] in [[0xff], [0xc3], [0xe2, 0x82], [0xc0, 0xaf], [0xed, 0xa0, 0x80]] {
            let payload = Array(#"{"k":"test","m":"ok "#.utf8) + invalid + Array(#""}"#.utf8)
            #expect(JobPayloadReader.read(payload) == nil, "\(invalid)")
        }
    }
}
