#if canImport(Glibc)
    import Glibc
#endif

/// The standard `process_*` families every Prometheus client library exports, so the usual dashboards and alerts
/// (CPU, memory, descriptors against their limit, restarts by start time) work on the relay unchanged.
///
/// Read from the kernel at scrape time, never cached: a scrape every few seconds costs a few small reads of /proc,
/// and a cached figure would hide a descriptor leak until the next refresh. The one exception is the start time,
/// which cannot change: it is read once, because finding `btime` in /proc/stat (whose `intr` line runs to kilobytes)
/// was a fifth of the CPU of a whole scrape of `serve`. A figure the kernel does not give (a /proc hidden by a
/// sandbox) is left out rather than reported as 0, which would read as "no memory in use".
enum ProcessMetrics {
    static let cpuSeconds = "process_cpu_seconds_total"
    static let residentMemory = "process_resident_memory_bytes"
    static let openFileDescriptors = "process_open_fds"
    static let maxFileDescriptors = "process_max_fds"
    static let startTime = "process_start_time_seconds"

    /// HELP texts as client_golang words them, so the families look the same as any other exporter's.
    static func describe(in registry: MetricsRegistry) {
        registry.describe(cpuSeconds, .counter, "Total user and system CPU time spent in seconds.")
        registry.describe(residentMemory, .gauge, "Resident memory size in bytes.")
        registry.describe(openFileDescriptors, .gauge, "Number of open file descriptors.")
        registry.describe(maxFileDescriptors, .gauge, "Maximum number of open file descriptors.")
        registry.describe(startTime, .gauge, "Start time of the process since unix epoch in seconds.")
        registry.collect { samples() }
    }

    static func samples() -> [(name: String, labels: [(String, String)], value: Double)] {
        var out: [(name: String, labels: [(String, String)], value: Double)] = []
        func add(_ name: String, _ value: Double?) {
            if let value { out.append((name, [], value)) }
        }
        add(cpuSeconds, cpuTime())
        add(residentMemory, readFile("/proc/self/statm").flatMap { residentPages(statm: $0) }.map { $0 * Double(sysconf(Int32(_SC_PAGESIZE))) })
        add(openFileDescriptors, openDescriptorCount())
        add(maxFileDescriptors, descriptorLimit())
        add(startTime, processStart)
        return out
    }

    /// Read at the first scrape (a static's initialiser runs once, whichever thread asks first).
    private static let processStart: Double? = {
        guard let stat = readFile("/proc/self/stat"), let system = readFile("/proc/stat") else { return nil }
        return startSeconds(stat: stat, systemStat: system, ticksPerSecond: Double(sysconf(Int32(_SC_CLK_TCK))))
    }()

    /// User plus system time of every thread, as getrusage sums them.
    private static func cpuTime() -> Double? {
        var usage = rusage()
        guard getrusage(RUSAGE_SELF.rawValue, &usage) == 0 else { return nil }
        func seconds(_ time: timeval) -> Double { Double(time.tv_sec) + Double(time.tv_usec) / 1_000_000 }
        return seconds(usage.ru_utime) + seconds(usage.ru_stime)
    }

    /// The soft limit: the one `open` fails at (the relay checks it against HTTP_MAX_CONNECTIONS at start-up).
    /// Unlimited (RLIM_INFINITY, all bits set) is left out.
    private static func descriptorLimit() -> Double? {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return nil }
        return limit.rlim_cur == rlim_t.max ? nil : Double(limit.rlim_cur)
    }

    /// The process's open descriptors. Since Linux 6.2 the size `stat` reports for /proc/self/fd is their number: one
    /// system call. Listing the directory, as earlier kernels need (they report 0 there), makes the kernel build an
    /// entry for every descriptor, and was a fifth of the CPU of a scrape of `serve` (thirty-third session).
    static func openDescriptorCount() -> Double? {
        var info = stat()
        if stat("/proc/self/fd", &info) == 0, info.st_size > 0 { return Double(info.st_size) }
        return listedDescriptorCount()
    }

    /// Entries of /proc/self/fd, less the descriptor the listing itself holds open.
    static func listedDescriptorCount() -> Double? {
        guard let directory = opendir("/proc/self/fd") else { return nil }
        defer { closedir(directory) }
        var count = 0
        while let entry = readdir(directory) {
            let isDotEntry = withUnsafeBytes(of: entry.pointee.d_name) { name in
                name[0] == UInt8(ascii: ".") && (name[1] == 0 || (name[1] == UInt8(ascii: ".") && name[2] == 0))
            }
            if !isDotEntry { count += 1 }
        }
        return Double(count - 1)
    }

    /// statm's second field: resident pages.
    static func residentPages(statm: String) -> Double? {
        let fields = statm.split(separator: " ")
        guard fields.count > 1, let pages = Double(fields[1]) else { return nil }
        return pages
    }

    /// The process's start as Unix seconds: /proc/self/stat's field 22 (ticks after boot) plus /proc/stat's
    /// `btime` (boot, Unix seconds). The command name (field 2) is in parentheses and may hold spaces or
    /// parentheses itself, so fields are counted from the last `)`.
    static func startSeconds(stat: String, systemStat: String, ticksPerSecond: Double) -> Double? {
        guard let close = stat.lastIndex(of: ")"), ticksPerSecond > 0 else { return nil }
        let afterName = stat[stat.index(after: close)...].split(separator: " ")
        // afterName[0] is field 3 (state), so field 22 is at index 19.
        guard afterName.count > 19, let ticks = Double(afterName[19]) else { return nil }
        guard
            let bootLine = systemStat.split(separator: "\n").first(where: { $0.hasPrefix("btime ") }),
            let boot = Double(bootLine.dropFirst("btime ".count).drop(while: { $0 == " " }))
        else { return nil }
        return boot + ticks / ticksPerSecond
    }

    /// A whole /proc file. Their size reads as 0, so this reads to the end rather than by the size.
    static func readFile(_ path: String) -> String? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { return count == 0 ? String(decoding: bytes, as: UTF8.self) : nil }
            bytes.append(contentsOf: chunk[0..<count])
        }
    }
}
