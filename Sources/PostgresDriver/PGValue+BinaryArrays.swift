/// Array parameters in PostgreSQL's binary array format (`array_send`), sent like `bytea` values in binary format.
///
/// Binary arrays cost no quoting, escaping or hex-encoding on either side, so the batch statements (one array per
/// column, unnested into rows) stay cheap at any batch size and keep one prepared statement. The element type travels
/// in the array's header, and the server refuses an array whose element type is not the one the SQL casts the
/// parameter to (`$1::text[]` takes only `texts`): a mismatch is an error, never a misread value.
/// https://www.postgresql.org/docs/15/protocol-overview.html#PROTOCOL-FORMAT-CODES, `array_recv` in arrayfuncs.c.
extension PGValue {
    /// For `text[]`.
    package static func texts(_ values: some Sequence<String>) -> PGValue {
        binaryArray(elementType: 25, values.map { Array($0.utf8) })
    }

    /// For `bigint[]`.
    package static func bigints(_ values: some Sequence<Int64>) -> PGValue {
        binaryArray(elementType: 20, values.map { bigEndianBytes(of: $0) })
    }

    /// For `integer[]`.
    package static func integers(_ values: some Sequence<Int>) -> PGValue {
        binaryArray(elementType: 23, values.map { bigEndianBytes(of: Int32(clamping: $0)) })
    }

    /// For `boolean[]`.
    package static func booleans(_ values: some Sequence<Bool>) -> PGValue {
        binaryArray(elementType: 16, values.map { [$0 ? 1 : 0] })
    }

    /// For `bytea[]`; nil elements are NULL.
    package static func byteArrays(_ values: some Sequence<[UInt8]?>) -> PGValue {
        binaryArray(elementType: 17, Array(values))
    }

    /// One-dimensional array: dimensions, a has-nulls flag, the element type's OID, then (length, bytes) per element,
    /// length -1 for NULL. All integers are big-endian.
    private static func binaryArray(elementType: Int32, _ elements: [[UInt8]?]) -> PGValue {
        let hasNulls = elements.contains { $0 == nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(20 + elements.reduce(0) { $0 + 4 + ($1?.count ?? 0) })
        bytes += bigEndianBytes(of: Int32(elements.isEmpty ? 0 : 1))
        bytes += bigEndianBytes(of: Int32(hasNulls ? 1 : 0))
        bytes += bigEndianBytes(of: elementType)
        if !elements.isEmpty {
            bytes += bigEndianBytes(of: Int32(elements.count))
            bytes += bigEndianBytes(of: Int32(1))  // lower bound: PostgreSQL arrays start at 1
        }
        for element in elements {
            if let element {
                bytes += bigEndianBytes(of: Int32(element.count))
                bytes += element
            } else {
                bytes += bigEndianBytes(of: Int32(-1))
            }
        }
        return .bytes(bytes)
    }

    private static func bigEndianBytes<Integer: FixedWidthInteger>(of value: Integer) -> [UInt8] {
        withUnsafeBytes(of: value.bigEndian) { Array($0) }
    }
}
