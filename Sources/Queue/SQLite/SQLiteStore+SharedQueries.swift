import Common
import SQLiteDriver

/// SQLite runs the statements both stores share (`SharedQueries`) on its reader and its writer.
extension SQLiteStore: SharedQueries {
    func writeStatement<T: Sendable>(_ body: (SQLiteConnection) throws -> T) throws(StoreError) -> T { try write(body) }

    /// Nothing: a deliverer in another process notices any commit by itself (`changeCounter`).
    func jobsBecameDue() {}
    func jobsBecameDue(in db: SQLiteConnection) {}

    func deletion(in db: SQLiteConnection) -> SQLiteDeviceDeletion { SQLiteDeviceDeletion(db: db) }

    /// A device's id is its primary key; its token the one other UNIQUE column.
    func isDuplicate(_ error: any Error, _ key: DeviceKey) -> Bool {
        guard let error = error as? SQLiteError else { return false }
        return key == .id ? error.isPrimaryKeyViolation : error.isUniqueViolation
    }
}

extension SQLiteConnection: QueryConnection {
    func query<T>(_ sql: String, _ values: [SQLiteValue], _ map: (SQLiteRow) throws -> T) throws -> [T] {
        try statement(portable: sql).rows(values, map)
    }

    func change(_ sql: String, _ values: [SQLiteValue]) throws -> Int { try statement(portable: sql).run(values) }
}

extension SQLiteRow: ResultRow {}
extension SQLiteValue: BoundValue {}
