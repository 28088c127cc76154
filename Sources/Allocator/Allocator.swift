internal import CAllocator

/// The process's memory allocator: jemalloc's `malloc`, linked in place of glibc's (`Sources/CAllocator` says why
/// and with which options).
public enum Allocator {
    /// What this process's `malloc` really is, as `version` prints it: "jemalloc 5.3.0-… (narenas:1,
    /// tcache_max:4096,dirty_decay_ms:1000)" with the options in force (MALLOC_CONF overrides the built-in ones), or
    /// the file another `malloc` came from ("libc.so.6" when glibc's libc is preloaded ahead of jemalloc).
    public static var description: String {
        withUnsafeTemporaryAllocation(of: CChar.self, capacity: 160) { buffer in
            String(cString: kumapush_allocator(buffer.baseAddress, UInt(buffer.count)))
        }
    }
}
