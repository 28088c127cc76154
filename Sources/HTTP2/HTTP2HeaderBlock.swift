/// A request's headers laid out once, the way nghttp2 takes them: every name and value in one byte buffer, each with
/// whether it is kept out of the HPACK dynamic table. Built where the request is built (once per push, on the
/// delivery thread), so the event loop hands it to nghttp2 without hashing, lower-casing or copying strings header
/// by header — that was a sixth of the event loop's instructions per push (docs/performance.md, sixteenth session).
///
/// Layout, per header: one byte for its `Indexing`, the name's and the value's length (4 bytes each, little endian),
/// then the name's and the value's UTF-8. One allocation for the whole block.
public struct HTTP2HeaderBlock: Sendable, Equatable {
    /// What HPACK does with a header: whether it enters the connection's dynamic table, so later requests send an
    /// index instead of the name (and value).
    public enum Indexing: UInt8, Sendable {
        /// Added to the table: the same header comes again (the topic, the push type).
        case indexed = 0
        /// Never added (`NGHTTP2_NV_FLAG_NO_INDEX`): secret (the provider token), or of no use to the table.
        case never = 1
        /// A value unique to each request under a name every request has (APNs' `apns-id`, `apns-expiration`):
        /// added with the connection's first request only, so later requests name it by its index and spell only
        /// the value, and their values do not fill the peer's table. Apple's advice for APNs (docs/architecture.md).
        case uniqueValue = 2
    }

    private(set) var bytes: [UInt8] = []
    /// Headers in the block.
    public private(set) var count = 0
    /// Whether a header is `Indexing.uniqueValue` (asked once per request, not looked for).
    private(set) var hasUniqueValues = false

    static let entryHead = 9

    public init(reservingCapacity capacity: Int = 0) {
        bytes.reserveCapacity(capacity)
    }

    /// A request's head (`HTTP2Request.head`): `:path` (`prefix + path`), never indexed, then room for
    /// `capacity` more bytes of headers.
    public init(path: String, prefix: String = "", reservingCapacity capacity: Int = 0) {
        bytes.reserveCapacity(Self.entryHead + Self.pathName.utf8CodeUnitCount + prefix.utf8.count + path.utf8.count + capacity)
        append(":path", path, prefix: prefix, indexing: .never)
    }

    private static let pathName: StaticString = ":path"

    /// Whether the first header is `:path` (`init(path:)`): its name read where the layout puts it.
    var startsWithPath: Bool {
        bytes.withUnsafeBufferPointer { buffer in
            let name = UnsafeBufferPointer(start: Self.pathName.utf8Start, count: Self.pathName.utf8CodeUnitCount)
            return buffer.count >= Self.entryHead + name.count && Self.length(in: buffer, at: 1) == name.count
                && buffer[Self.entryHead..<Self.entryHead + name.count].elementsEqual(name)
        }
    }

    /// Every header but the first.
    func droppingFirst() -> HTTP2HeaderBlock {
        var rest = HTTP2HeaderBlock()
        var first = true
        bytes.withUnsafeBufferPointer { buffer in
            Self.forEach(in: buffer) { name, value, indexing in
                if !first { rest.append(name: name, prefix: UnsafeBufferPointer(start: nil, count: 0), value: value, indexing: indexing) }
                first = false
            }
        }
        return rest
    }

    /// Appends `name: prefix + value`. Names are lower-cased (HTTP/2 wants them so; callers mostly write them so
    /// already).
    public mutating func append(_ name: String, _ value: String, prefix: String = "", indexing: Indexing = .indexed) {
        // Each string copied once, as a buffer: walking `String.UTF8View` byte by byte (to copy, or to look for
        // capitals) cost more than the rest of building a push's headers.
        Self.withBytes(of: name) { name in
            Self.withBytes(of: prefix) { prefix in
                Self.withBytes(of: value) { value in append(name: name, prefix: prefix, value: value, indexing: indexing) }
            }
        }
    }

    /// `text`'s UTF-8, lent where it lies when the string is contiguous (every native one): `withUTF8` is mutating, so
    /// it took a copy of each string, a retain and a release, three strings a header, on every push.
    private static func withBytes(of text: String, _ body: (UnsafeBufferPointer<UInt8>) -> Void) {
        if text.utf8.withContiguousStorageIfAvailable(body) != nil { return }
        var text = text
        text.withUTF8(body)
    }

    /// Appends `name: number` in decimal, as `String(number)` writes it, without making the String (the
    /// deliverer's `apns-expiration`, on every push).
    public mutating func append(_ name: String, decimal number: Int, indexing: Indexing = .indexed) {
        var name = name
        // The magnitude is unsigned, so Int.min has one too; written from the end of room for a sign and 20 digits.
        var rest = number.magnitude
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 21) { digits in
            var start = digits.count
            repeat {
                start -= 1
                digits.initializeElement(at: start, to: UInt8(ascii: "0") + UInt8(rest % 10))
                rest /= 10
            } while rest > 0
            if number < 0 {
                start -= 1
                digits.initializeElement(at: start, to: UInt8(ascii: "-"))
            }
            name.withUTF8 { name in
                append(
                    name: name, prefix: UnsafeBufferPointer(start: nil, count: 0), value: UnsafeBufferPointer(rebasing: digits[start...]),
                    indexing: indexing)
            }
        }
    }

    /// Appends every header of `other`, after those already here (a block of fixed headers built once).
    public mutating func append(contentsOf other: HTTP2HeaderBlock) {
        bytes.append(contentsOf: other.bytes)
        count += other.count
        hasUniqueValues = hasUniqueValues || other.hasUniqueValues
    }

    /// Bytes the block takes (for reserving room for it in another).
    public var byteCount: Int { bytes.count }

    private mutating func append(
        name: UnsafeBufferPointer<UInt8>, prefix: UnsafeBufferPointer<UInt8>, value: UnsafeBufferPointer<UInt8>, indexing: Indexing
    ) {
        // The whole entry laid out on the stack (the name lower-cased as it is copied) and appended at once: appended
        // byte by byte and part by part, and checked index by index, the four headers of a push cost about 2,800
        // instructions (callgrind, nineteenth session).
        let size = Self.entryHead + name.count + prefix.count + value.count
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: size) { entry in
            entry.initializeElement(at: 0, to: indexing.rawValue)
            Self.writeLength(name.count, into: entry, at: 1)
            Self.writeLength(prefix.count + value.count, into: entry, at: 5)
            var offset = Self.entryHead
            for byte in name {
                entry.initializeElement(at: offset, to: byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") ? byte | 0x20 : byte)
                offset += 1
            }
            if let start = prefix.baseAddress {
                (entry.baseAddress! + offset).initialize(from: start, count: prefix.count)
                offset += prefix.count
            }
            if let start = value.baseAddress { (entry.baseAddress! + offset).initialize(from: start, count: value.count) }
            bytes.append(contentsOf: UnsafeBufferPointer(entry))
        }
        count += 1
        if indexing == .uniqueValue { hasUniqueValues = true }
    }

    private static func writeLength(_ length: Int, into head: UnsafeMutableBufferPointer<UInt8>, at offset: Int) {
        let value = UInt32(length)
        for byte in 0..<4 { head.initializeElement(at: offset + byte, to: UInt8(truncatingIfNeeded: value >> (8 * byte))) }
    }

    /// The headers, in order (tests, and whoever wants to read a request back).
    public var fields: [(name: String, value: String, indexing: Indexing)] {
        var fields: [(name: String, value: String, indexing: Indexing)] = []
        bytes.withUnsafeBufferPointer { buffer in
            Self.forEach(in: buffer) { name, value, indexing in
                fields.append((String(decoding: name, as: UTF8.self), String(decoding: value, as: UTF8.self), indexing))
            }
        }
        return fields
    }

    /// Calls `body` with each header's name and value bytes (views into `buffer`) and its indexing, in order.
    static func forEach(
        in buffer: UnsafeBufferPointer<UInt8>,
        _ body: (UnsafeBufferPointer<UInt8>, UnsafeBufferPointer<UInt8>, Indexing) throws -> Void
    ) rethrows {
        var offset = 0
        while offset < buffer.count {
            // Only `append` writes the byte, from an `Indexing`.
            let indexing = Indexing(rawValue: buffer[offset]) ?? .never
            let nameLength = length(in: buffer, at: offset + 1)
            let valueLength = length(in: buffer, at: offset + 5)
            let nameStart = offset + entryHead
            try body(
                UnsafeBufferPointer(rebasing: buffer[nameStart..<nameStart + nameLength]),
                UnsafeBufferPointer(rebasing: buffer[nameStart + nameLength..<nameStart + nameLength + valueLength]), indexing)
            offset = nameStart + nameLength + valueLength
        }
    }

    private static func length(in buffer: UnsafeBufferPointer<UInt8>, at offset: Int) -> Int {
        (0..<4).reduce(0) { $0 | Int(buffer[offset + $1]) << (8 * $1) }
    }
}
