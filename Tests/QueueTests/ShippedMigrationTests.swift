import Common
import Testing

@testable import Queue

/// "Never edit a shipped migration: add the next number" (`Migration`), checked: a database migrated by an older
/// binary never runs an edited migration again, so an edit would leave old and new databases with different
/// schemas under one version number. Each shipped migration's statements — its SQL without comments, whitespace
/// collapsed, so comments may be reworded — are pinned here by their hash, per store. A new migration adds a line.
@Suite struct ShippedMigrationTests {
    static let sqlite: [Int: String] = [
        1: "11cb4380ec5230b9", 2: "b244c563b12a8edb", 3: "adfaa4b89af20e40", 4: "f7014a2aafe4244c",
        5: "164205b1f9b5cec5", 6: "1cfb57ff8105b308", 7: "04f97d606ee954ac", 8: "07f4fe698b6c79d7",
        9: "e8e4bebd8eccfce6", 10: "f013b87ac98698df", 11: "1399a9e79762ee2a", 12: "72b2e90cc5a82d58",
        13: "31acd8d9012a2a37", 14: "96234a5ca520ed2c"
    ]
    static let postgres: [Int: String] = [
        1: "641c161fa14985ed", 2: "b6f1562ab03e0202", 3: "12c4dcc3f7647c4d", 4: "86735c7b5b3e4918",
        5: "f74f47a78b381d12", 6: "1cfb57ff8105b308", 7: "c24f6feb32667fa8", 8: "368c8ac29dfea19c",
        9: "e8e4bebd8eccfce6", 11: "a65f2c9383d62fd3", 13: "9991c1d056d7f4fd", 14: "d9bb88181fb45fdd"
    ]

    /// The statements of `sql`: `--` comments dropped, every run of whitespace one space. (No shipped migration has
    /// `--` or a run of spaces inside a string literal, where this would miss an edit.)
    static func statements(_ sql: String) -> String {
        sql.split(separator: "\n", omittingEmptySubsequences: false)
            .map { line in line.range(of: "--").map { line[..<$0.lowerBound] } ?? line[...] }
            .joined(separator: " ")
            .split(whereSeparator: \.isWhitespace).joined(separator: " ")
    }

    static func fingerprints(_ migrations: [Migration]) -> [Int: String] {
        Dictionary(uniqueKeysWithValues: migrations.map { ($0.version, String(Crypto.sha256Hex(statements($0.sql)).prefix(16))) })
    }

    @Test func sqliteShippedMigrationsAreUnchanged() {
        #expect(Migrations.all.map(\.version) == Migrations.all.map(\.version).sorted(), "applied in order")
        let now = Self.fingerprints(Migrations.all)
        #expect(Set(now.keys) == Set(Self.sqlite.keys), "a new migration is pinned here when it ships")
        for (version, pinned) in Self.sqlite { #expect(now[version] == pinned, "SQLite migration \(version) was edited") }
    }

    @Test func postgresShippedMigrationsAreUnchanged() {
        #expect(PostgresMigrations.all.map(\.version) == PostgresMigrations.all.map(\.version).sorted(), "applied in order")
        let now = Self.fingerprints(PostgresMigrations.all)
        #expect(Set(now.keys) == Set(Self.postgres.keys), "a new migration is pinned here when it ships")
        for (version, pinned) in Self.postgres { #expect(now[version] == pinned, "PostgreSQL migration \(version) was edited") }
    }

    /// Migrations from 13 on that change what the release before reads or writes, so that its processes must stop
    /// with exit 2 rather than restart beside them during a rolling upgrade. Listed on purpose: none so far.
    static let breaking: Set<Int> = []

    /// From 13 on, every migration says whether the release before keeps working beside it (`keepsWorkingFrom`, read
    /// by that release's processes restarting during a rolling upgrade), or is listed above as breaking: forgetting
    /// the field would make every older process refuse the database for a migration that only adds.
    @Test func everyMigrationFromThirteenOnSaysWhetherTheReleaseBeforeKeepsWorking() {
        for migration in Migrations.all + PostgresMigrations.all where migration.version >= 13 {
            #expect(
                (migration.keepsWorkingFrom != nil) != Self.breaking.contains(migration.version),
                "migration \(migration.version): set keepsWorkingFrom, or list it in `breaking`, not both")
            if let from = migration.keepsWorkingFrom { #expect(from < migration.version) }
        }
    }
}
