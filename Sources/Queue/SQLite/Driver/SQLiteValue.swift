/// A value bound to a statement parameter.
enum SQLiteValue {
    case integer(Int64)
    case text(String)
    case blob([UInt8])
    case null

    static func optional(_ value: Int64?) -> SQLiteValue { value.map { .integer($0) } ?? .null }
    static func optional(_ value: String?) -> SQLiteValue { value.map { .text($0) } ?? .null }
}
