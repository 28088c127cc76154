import Common

/// SQLite runs the statements both stores share (`SharedQueries`) on its reader and its writer.
extension SQLiteStore: SharedQueries {
    func writeStatement<T: Sendable>(_ body: (SQLiteConnection) throws -> T) throws(StoreError) -> T { try write(body) }

    /// Nothing: a deliverer in another process notices any commit by itself (`changeCounter`).
    func jobsBecameDue() {}
}

extension SQLiteConnection: QueryConnection {
    func query<T>(_ sql: String, _ values: [SQLiteValue], _ map: (SQLiteRow) throws -> T) throws -> [T] {
        try statement(portable: sql).rows(values, map)
    }

    func change(_ sql: String, _ values: [SQLiteValue]) throws -> Int { try statement(portable: sql).run(values) }
}

extension SQLiteRow: ResultRow {}
extension SQLiteValue: BoundValue {}
