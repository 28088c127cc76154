/// A request's headers laid out once, the way nghttp2 takes them: every name and value in one byte buffer, each with
/// whether it is kept out of the HPACK dynamic table. Built where the request is built (once per push, on the
/// delivery thread), so the event loop hands it to nghttp2 without hashing, lower-casing or copying strings header
/// by header — that was a sixth of the event loop's instructions per push (docs/performance.md, sixteenth session).
///
/// Layout, per header: one flag byte (1: never indexed), the name's and the value's length (4 bytes each, little
/// endian), then the name's and the value's UTF-8. One allocation for the whole block.
public struct HTTP2HeaderBlock: Sendable, Equatable {
    private(set) var bytes: [UInt8] = []
    /// Headers in the block.
    public private(set) var count = 0

    static let entryHead = 9

    public init(reservingCapacity capacity: Int = 0) {
        bytes.reserveCapacity(capacity)
    }

    /// Appends `name: prefix + value`. Names are lower-cased (HTTP/2 wants them so; callers mostly write them so
    /// already). `sensitive`: never put in the HPACK dynamic table (`NGHTTP2_NV_FLAG_NO_INDEX`): unique per request
    /// (Apple's advice for what changes every push), or secret.
    public mutating func append(_ name: String, _ value: String, prefix: String = "", sensitive: Bool = false) {
        let nameLength = name.utf8.count
        bytes.append(sensitive ? 1 : 0)
        Self.appendLength(nameLength, to: &bytes)
        Self.appendLength(prefix.utf8.count + value.utf8.count, to: &bytes)
        if name.utf8.contains(where: { (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains($0) }) {
            bytes += name.lowercased().utf8
        } else {
            Self.appendUTF8(name, to: &bytes)
        }
        Self.appendUTF8(prefix, to: &bytes)
        Self.appendUTF8(value, to: &bytes)
        count += 1
    }

    /// `text`'s UTF-8 in one copy (byte by byte through `String.UTF8View` cost more than everything else here).
    private static func appendUTF8(_ text: String, to bytes: inout [UInt8]) {
        var text = text
        text.withUTF8 { bytes.append(contentsOf: $0) }
    }

    /// The headers, in order (tests, and whoever wants to read a request back).
    public var fields: [(name: String, value: String, sensitive: Bool)] {
        var fields: [(name: String, value: String, sensitive: Bool)] = []
        bytes.withUnsafeBufferPointer { buffer in
            Self.forEach(in: buffer) { name, value, sensitive in
                fields.append((String(decoding: name, as: UTF8.self), String(decoding: value, as: UTF8.self), sensitive))
            }
        }
        return fields
    }

    /// Calls `body` with each header's name and value bytes (views into `buffer`) and its flag, in order.
    static func forEach(
        in buffer: UnsafeBufferPointer<UInt8>,
        _ body: (UnsafeBufferPointer<UInt8>, UnsafeBufferPointer<UInt8>, Bool) throws -> Void
    ) rethrows {
        var offset = 0
        while offset < buffer.count {
            let sensitive = buffer[offset] != 0
            let nameLength = length(in: buffer, at: offset + 1)
            let valueLength = length(in: buffer, at: offset + 5)
            let nameStart = offset + entryHead
            try body(
                UnsafeBufferPointer(rebasing: buffer[nameStart..<nameStart + nameLength]),
                UnsafeBufferPointer(rebasing: buffer[nameStart + nameLength..<nameStart + nameLength + valueLength]), sensitive)
            offset = nameStart + nameLength + valueLength
        }
    }

    private static func appendLength(_ length: Int, to bytes: inout [UInt8]) {
        withUnsafeBytes(of: UInt32(length).littleEndian) { bytes.append(contentsOf: $0) }
    }

    private static func length(in buffer: UnsafeBufferPointer<UInt8>, at offset: Int) -> Int {
        (0..<4).reduce(0) { $0 | Int(buffer[offset + $1]) << (8 * $1) }
    }
}
