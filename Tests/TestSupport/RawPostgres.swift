import CLibPQ
import Foundation

/// A bare libpq connection for tests that must reach past the store (creating a database, planting a future
/// migration or a foreign table, reading rows as they are).
public final class RawPostgres {
    private let handle: OpaquePointer

    public init(_ conninfo: String) throws {
        guard let connection = PQconnectdb(conninfo) else { throw Self.failure("out of memory") }
        guard PQstatus(connection) == CONNECTION_OK else {
            let message = String(cString: PQerrorMessage(connection))
            PQfinish(connection)
            throw Self.failure(message)
        }
        handle = connection
    }

    deinit { PQfinish(handle) }

    public func execute(_ sql: String) throws {
        _ = try query(sql)
    }

    /// Every row of the last statement in `sql`, each column as text ("" for NULL).
    public func query(_ sql: String) throws -> [[String]] {
        let result = PQexec(handle, sql)
        defer { PQclear(result) }
        let status = PQresultStatus(result)
        guard status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK else {
            throw Self.failure(String(cString: PQerrorMessage(handle)))
        }
        return (0..<PQntuples(result)).map { row in
            (0..<PQnfields(result)).map { column in String(cString: PQgetvalue(result, row, column)) }
        }
    }

    private static func failure(_ message: String) -> NSError {
        NSError(domain: "postgres", code: 1, userInfo: [NSLocalizedDescriptionKey: message])
    }
}
