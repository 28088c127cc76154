/// A value bound to a PostgreSQL statement parameter. The SQL text casts each parameter (`$1::bigint`,
/// `$2::bytea`), so no type OIDs are sent.
@usableFromInline package enum PGValue {
    case integer(Int64)
    case text(String)
    /// Sent in binary format: raw bytes, no escaping.
    case bytes([UInt8])
    case boolean(Bool)
    case null

    /// An integer array parameter in text format (`{1,2,3}`), so the SQL may cast it to `bigint[]` or `integer[]`.
    package static func integerArray(_ values: some Sequence<Int64>) -> PGValue {
        .text("{" + values.map(String.init).joined(separator: ",") + "}")
    }

    /// Whether libpq gets it in binary (1) or text (0) format.
    package var format: Int32 {
        if case .bytes = self { return 1 }
        return 0
    }

    /// The bytes libpq sends: text-format values NUL-terminated (libpq ignores their length), nil for NULL.
    package var wireBytes: [UInt8]? {
        switch self {
        case .integer(let number): return Array(String(number).utf8) + [0]
        case .text(let text): return Array(text.utf8) + [0]
        case .bytes(let bytes): return bytes
        case .boolean(let flag): return flag ? [UInt8(ascii: "t"), 0] : [UInt8(ascii: "f"), 0]
        case .null: return nil
        }
    }
}
