import Glibc

/// Reads a job payload in the exact form `AlertEvent.jobPayload` writes — keys in its order, strings without
/// escapes — in one pass over the bytes, without building a JSON tree: the generic parser's tree cost about
/// 8,000 instructions a push, a fifth of the deliverer's own work per push (docs/performance.md, sixteenth
/// session). Anything else (an escape in a string, other keys or order, invalid UTF-8, a number that does not fit)
/// gives nil, and `AlertEvent(jobPayload:)` reads it with the generic parser instead, as before.
struct JobPayloadReader {
    private let bytes: UnsafeBufferPointer<UInt8>
    private var offset = 0

    private init(_ bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

    static func read(_ payload: [UInt8]) -> AlertEvent? {
        payload.withUnsafeBufferPointer { buffer in
            var reader = JobPayloadReader(buffer)
            return reader.event()
        }
    }

    private mutating func event() -> AlertEvent? {
        guard literal(#"{"k":"#), let name = string(), let kind = AlertEvent.Kind(rawValue: name) else { return nil }
        var event = AlertEvent(kind: kind, message: "")
        if literal(#","s":"#) {
            // An unknown status is kept as nil, as the generic reading does.
            guard let status = integer() else { return nil }
            event.status = AlertEvent.Status(rawValue: status)
        }
        if literal(#","i":false"#) { event.important = false }
        if literal(#","id":"#) {
            guard let id = integer() else { return nil }
            event.monitorID = id
        }
        if literal(#","n":"#) {
            guard let name = string() else { return nil }
            event.monitorName = name
        }
        if literal(#","t":"#) {
            guard let title = string() else { return nil }
            event.title = title
        }
        guard literal(#","m":"#), let message = string(), literal("}"), offset == bytes.count else { return nil }
        event.message = message
        return event
    }

    /// Consumes `text` if the bytes continue with it.
    private mutating func literal(_ text: StaticString) -> Bool {
        let count = text.utf8CodeUnitCount
        // One memcmp: comparing byte by byte was 85 instructions a literal, eight literals a push.
        guard bytes.count - offset >= count, memcmp(bytes.baseAddress! + offset, text.utf8Start, count) == 0 else { return false }
        offset += count
        return true
    }

    /// A quoted string without escapes or control characters, as valid UTF-8.
    private mutating func string() -> String? {
        guard offset < bytes.count, bytes[offset] == UInt8(ascii: "\"") else { return nil }
        let start = offset + 1
        var end = start
        var ascii = true
        while end < bytes.count {
            let byte = bytes[end]
            if byte == UInt8(ascii: "\"") { break }
            if byte == UInt8(ascii: "\\") || byte < 0x20 { return nil }
            if byte >= 0x80 { ascii = false }
            end += 1
        }
        guard end < bytes.count else { return nil }
        let text = UnsafeBufferPointer(rebasing: bytes[start..<end])
        // ASCII is valid UTF-8 as it is: `String(decoding:)` (which would repair, not refuse, invalid UTF-8) takes it
        // without the generic validation `String(validating:)` runs, about 950 instructions a string, three strings
        // a push (callgrind, nineteenth session). Anything else is validated, and invalid UTF-8 refused.
        guard let string = ascii ? String(decoding: text, as: UTF8.self) : String(validating: text, as: UTF8.self) else { return nil }
        offset = end + 1
        return string
    }

    /// An integer as Swift writes one: an optional minus and digits without a leading zero, fitting in `Int`.
    private mutating func integer() -> Int? {
        var end = offset
        if end < bytes.count, bytes[end] == UInt8(ascii: "-") { end += 1 }
        let digits = end
        while end < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[end]) { end += 1 }
        guard end > digits, end - digits <= 18, bytes[digits] != UInt8(ascii: "0") || end - digits == 1 else { return nil }
        var value = 0
        for index in digits..<end { value = value * 10 + Int(bytes[index] - UInt8(ascii: "0")) }
        if bytes[offset] == UInt8(ascii: "-") { value = -value }
        offset = end
        return value
    }
}
