import Common

/// PostgreSQL runs the statements both stores share (`SharedQueries`) as written, each prepared once per connection.
extension PostgresStore: SharedQueries {
    func jobsBecameDue() { signalChange() }
}

extension PGConnection: QueryConnection {
    func query<T>(_ sql: String, _ values: [PGValue], _ map: (PGRow) throws -> T) throws -> [T] { try rows(sql, values, map) }

    func change(_ sql: String, _ values: [PGValue]) throws -> Int { try run(sql, values) }
}

extension PGRow: ResultRow {}
extension PGValue: BoundValue {}
