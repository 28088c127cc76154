/// Why a store operation failed, in the terms callers act on.
public struct StoreError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Code: Sendable, Equatable {
        /// Another device already has this token (PATCH → 409).
        case tokenConflict
        /// The database is temporarily unusable: locked too long, disk full, I/O error (→ 503, try later).
        case unavailable
        /// The file is not a relay database, or is damaged (start-up stops with exit 2).
        case notADatabase
        /// A newer binary migrated this database; this one must not touch it (start-up stops with exit 2).
        case newerSchema
        /// Anything else: a bug or an unexpected state.
        case failed
    }

    public let code: Code
    public let message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { message }
}

extension StoreError {
    /// Runs `body`, throwing whatever it throws as the `StoreError` that `translate` makes of it: the one shape of every
    /// store method that reaches a connection (`SQLiteStore.storeError`, `PostgresStore.storeError` read their
    /// driver's errors).
    static func translating<T>(_ translate: (any Error) -> StoreError, _ body: () throws -> T) throws(StoreError) -> T {
        do {
            return try body()
        } catch {
            throw translate(error)
        }
    }
}
