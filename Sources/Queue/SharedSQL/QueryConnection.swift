import Common
import SQLiteDriver

/// A row as the statements both stores share read it.
protocol ResultRow {
    func text(_ column: Int32) -> String
    func optionalText(_ column: Int32) -> String?
    func int(_ column: Int32) -> Int
    func int64(_ column: Int32) -> Int64
    func optionalInt64(_ column: Int32) -> Int64?
    func bool(_ column: Int32) -> Bool
}

/// A value bound to a parameter of a statement both stores share.
protocol BoundValue {
    static func text(_ value: String) -> Self
    static func integer(_ value: Int64) -> Self
    static var null: Self { get }
}

extension BoundValue {
    static func optional(_ value: Int64?) -> Self { value.map { .integer($0) } ?? .null }
    static func optional(_ value: String?) -> Self { value.map { .text($0) } ?? .null }
}

/// A connection as the statements both stores share see it. They are written once, with PostgreSQL's numbered,
/// typed placeholders (`$1::text`); SQLite's connection reads them as `?1` (`SQLitePlaceholders`). Each
/// connection prepares a text once and keeps it, so a statement's text comes from a bounded set (a dead-letter
/// filter has 16 forms).
protocol QueryConnection {
    associatedtype Row: ResultRow
    associatedtype Value: BoundValue
    /// Runs `sql` with `values` and maps each result row.
    func query<T>(_ sql: String, _ values: [Value], _ map: (Row) throws -> T) throws -> [T]
    /// Runs `sql` with `values` and returns how many rows it changed.
    func change(_ sql: String, _ values: [Value]) throws -> Int
}
