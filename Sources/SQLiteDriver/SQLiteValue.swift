/// A value bound to a statement parameter.
@usableFromInline package enum SQLiteValue {
    case integer(Int64)
    case text(String)
    case blob([UInt8])
    case null
}
