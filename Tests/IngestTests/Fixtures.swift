import Foundation

/// Files under Tests/Fixtures (shared with the e2e tests and the fuzz corpus).
enum Fixtures {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fixtures")

    static func bytes(_ name: String) -> [UInt8] {
        Array(try! Data(contentsOf: root.appendingPathComponent("webhooks/\(name)")))
    }

    static func text(_ name: String) -> String { String(decoding: bytes(name), as: UTF8.self) }
}
