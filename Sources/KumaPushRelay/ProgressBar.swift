import Foundation

/// A one-line progress bar on standard error when it is a terminal; silent otherwise (logs and pipes get the
/// command's plain summary line instead).
struct ProgressBar {
    let total: Int
    let label: String
    private let enabled = isatty(STDERR_FILENO) == 1

    init(total: Int, label: String) {
        self.total = total
        self.label = label
    }

    func update(_ done: Int) {
        guard enabled, total > 0 else { return }
        let width = 30
        let filled = min(width, done * width / total)
        let bar = String(repeating: "█", count: filled) + String(repeating: "·", count: width - filled)
        FileHandle.standardError.write(Data("\r\(label) [\(bar)] \(done)/\(total) (\(done * 100 / total)%)".utf8))
    }

    func finish() {
        guard enabled, total > 0 else { return }
        FileHandle.standardError.write(Data("\n".utf8))
    }
}
