import Common
import PostgresDriver

/// PostgreSQL runs the statements both stores share (`SharedQueries`) as written, each prepared once per connection.
extension PostgresStore: SharedQueries {
    func jobsBecameDue() { signalChange() }
    func jobsBecameDue(in db: PGConnection) { Self.notifyDeliverers(db) }

    func deletion(in db: PGConnection) -> PostgresDeviceDeletion { PostgresDeviceDeletion(db: db) }

    func isDuplicate(_ error: any Error, _ key: DeviceKey) -> Bool {
        guard let error = error as? PGError, error.isUniqueViolation else { return false }
        return error.constraint == (key == .id ? "devices_pkey" : "devices_device_token_key")
    }
}

extension PGConnection: QueryConnection {
    func query<T>(_ sql: String, _ values: [PGValue], _ map: (PGRow) throws -> T) throws -> [T] { try rows(sql, values, map) }

    func change(_ sql: String, _ values: [PGValue]) throws -> Int { try run(sql, values) }
}

extension PGRow: ResultRow {}
extension PGValue: BoundValue {}
