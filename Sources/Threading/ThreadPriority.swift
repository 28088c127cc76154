internal import CLinux
import Foundation

extension Thread {
    /// The calling thread's kernel id (`/proc/self/task/<id>`).
    public static var currentKernelID: Int32 { clinux_thread_id() }

    /// The calling thread's nice value, nil if it cannot be read.
    public static var currentNice: Int32? {
        let nice = clinux_thread_nice()
        return nice == Int32.min ? nil : nice
    }

    /// Lowers the calling thread's CPU priority by `steps` nice levels (19 at most, the lowest): for background work
    /// that should take a core the request threads leave idle rather than take turns with them. Only this thread:
    /// on Linux each thread has a nice value of its own, and threads it starts later inherit it. Returns the nice
    /// value it now runs at, nil if it could not be read or changed.
    @discardableResult
    public static func lowerCurrentPriority(by steps: Int32) -> Int32? {
        guard let nice = currentNice else { return nil }
        let lowered = min(19, nice + steps)
        return clinux_set_thread_nice(lowered) == 0 ? lowered : nil
    }
}
