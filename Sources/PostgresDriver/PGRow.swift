internal import CLibPQ

/// One row of a result; valid only inside the `rows` callback.
@usableFromInline package struct PGRow {
    let result: OpaquePointer
    let row: Int32

    package func isNull(_ column: Int32) -> Bool { PQgetisnull(result, row, column) == 1 }
    package func text(_ column: Int32) -> String { String(cString: PQgetvalue(result, row, column)) }
    package func optionalText(_ column: Int32) -> String? { isNull(column) ? nil : text(column) }
    package func int64(_ column: Int32) -> Int64 { Int64(text(column)) ?? 0 }
    package func int(_ column: Int32) -> Int { Int(int64(column)) }
    package func optionalInt64(_ column: Int32) -> Int64? { isNull(column) ? nil : int64(column) }
    package func bool(_ column: Int32) -> Bool { text(column) == "t" }

    /// A `bytea` column in the text format's hex encoding (`\x0102…`).
    package func bytes(_ column: Int32) -> [UInt8] {
        guard let value = PQgetvalue(result, row, column) else { return [] }
        let length = Int(PQgetlength(result, row, column))
        guard length >= 2 else { return [] }
        var bytes: [UInt8] = []
        bytes.reserveCapacity((length - 2) / 2)
        let raw = UnsafeRawPointer(value).assumingMemoryBound(to: UInt8.self)
        var index = 2
        while index + 1 < length {
            bytes.append(Self.nibble(raw[index]) << 4 | Self.nibble(raw[index + 1]))
            index += 2
        }
        return bytes
    }

    private static func nibble(_ character: UInt8) -> UInt8 {
        switch character {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return character - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return character - UInt8(ascii: "a") + 10
        default: return character &- UInt8(ascii: "A") &+ 10
        }
    }
}
