import Foundation
import Ingest
import Testing

/// Every input `make fuzz` kept (fuzz/corpus) and every crash it ever found (fuzz/crashes), run through the same
/// entry points: each must be handled without crashing.
@Suite struct FuzzCorpusTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("fuzz")

    static func inputs(_ target: String) -> [URL] {
        ["corpus", "crashes"].flatMap { kind -> [URL] in
            let folder = root.appendingPathComponent(kind).appendingPathComponent(target)
            return ((try? FileManager.default.contentsOfDirectory(at: folder, includingPropertiesForKeys: nil)) ?? [])
                .filter { !$0.lastPathComponent.hasPrefix(".") }
        }
    }

    @Test(arguments: FuzzEntryPoints.names)
    func everyKeptInputIsHandled(target: String) throws {
        let files = Self.inputs(target)
        #expect(!files.isEmpty, "the seed corpus for \(target) is committed")
        for file in files { FuzzEntryPoints.run(target, Array(try Data(contentsOf: file))) }
    }
}
