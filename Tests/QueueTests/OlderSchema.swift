import TestSupport

@testable import Queue

/// A SQLite database at `path` as a binary at schema `version` left it, for the upgrade tests: the migrations up
/// to that version applied and recorded, nothing after them. The connection stays open for the test to plant rows.
func sqliteDatabase(atSchema version: Int, path: String) throws -> RawSQLite {
    let raw = try RawSQLite(path: path)
    try raw.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY NOT NULL, name TEXT NOT NULL, applied_at INTEGER NOT NULL)")
    for migration in Migrations.all where migration.version <= version {
        try raw.execute(migration.sql)
        try raw.execute("INSERT INTO schema_migrations (version, name, applied_at) VALUES (\(migration.version), 'v\(migration.version)', 0)")
    }
    return raw
}
