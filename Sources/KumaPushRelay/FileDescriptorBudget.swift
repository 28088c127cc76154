import Common
import Foundation

/// HTTP_MAX_CONNECTIONS only holds if the process may open that many descriptors (issue 13): systemd and most
/// shells start services with a soft RLIMIT_NOFILE of 1,024, so 10,000 allowed connections would fail with EMFILE
/// long before the limit — and in `serve` starve the APNs and database connections first. At start-up the soft
/// limit is raised to what the settings need when the hard limit allows it; when it does not, start-up stops with
/// exit 2 naming the setting, rather than failing under load.
enum FileDescriptorBudget {
    /// Listeners, database files and WAL, APNs connections (both environments), metrics, logs, the event loops'
    /// epoll and wake-up descriptors, with room to spare.
    static let overhead = 128

    static func ensure(_ settings: Settings) throws(ConfigurationError) {
        let needed = rlim_t(settings.httpMaxConnections + overhead)
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur < needed else { return }
        guard limit.rlim_max >= needed else {
            throw ConfigurationError(
                variable: "HTTP_MAX_CONNECTIONS",
                message:
                    "\(settings.httpMaxConnections) connections need \(needed) open files, but RLIMIT_NOFILE allows \(limit.rlim_max): raise LimitNOFILE= (systemd) or ulimit -n, or lower HTTP_MAX_CONNECTIONS"
            )
        }
        limit.rlim_cur = needed
        guard setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else {
            throw ConfigurationError(variable: "HTTP_MAX_CONNECTIONS", message: "cannot raise RLIMIT_NOFILE to \(needed)")
        }
    }
}
