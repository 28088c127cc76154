internal import CLinux
import Foundation

extension Thread {
    /// Runs `body` on a new thread named `name`, for the kernel too: `top -H`, `ps -T`, `perf` and
    /// `/proc/<pid>/task/*/comm` show it. Foundation's `Thread.name` on Linux stays in the object when set before
    /// `start()`, so every thread of the relay showed the executable's name. The kernel keeps the first 15 bytes.
    public static func start(named name: String, _ body: @escaping @Sendable () -> Void) {
        let thread = Thread {
            _ = clinux_set_thread_name(name)
            body()
        }
        thread.name = name
        thread.start()
    }
}
