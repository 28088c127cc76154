// swift-tools-version:6.0
import Foundation
import PackageDescription

/// Compiler settings shared by every Swift target: Swift 6 language mode (strict concurrency) is the
/// package default; `ExistentialAny` makes every protocol-typed value say `any`.
let strictSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny")
]

let package = Package(
    name: "kumapush-relay",
    products: [
        .executable(name: "kumapush-relay", targets: ["KumaPushRelay"])
    ],
    targets: [
        // C libraries from Debian, one system-library module each: module map + shim header, nothing else.
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(name: "COpenSSL", pkgConfig: "openssl", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CMicroHTTPD", pkgConfig: "libmicrohttpd", providers: [.apt(["libmicrohttpd-dev"])]),
        .systemLibrary(name: "CNGHTTP2", pkgConfig: "libnghttp2", providers: [.apt(["libnghttp2-dev"])]),
        .systemLibrary(name: "CLibPQ", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),
        .systemLibrary(name: "CLinux"),
        .systemLibrary(name: "CSystemd", pkgConfig: "libsystemd", providers: [.apt(["libsystemd-dev"])]),

        // The spine: exe → Ingest/Deliver → Queue → Common.
        // Two thread helpers every module with a thread of its own uses: ThreadConfined and WakeUp.
        .target(name: "Threading", dependencies: ["CLinux"], swiftSettings: strictSettings),
        // The binary's malloc: jemalloc from Debian (libjemalloc-dev), linked in place of glibc's, with the options it
        // is built with (Sources/CAllocator/allocator.c says why). A C target: `malloc_conf` must be a C global of that
        // name. Allocator is its Swift face (what `version` prints).
        .target(name: "CAllocator", linkerSettings: [.linkedLibrary("jemalloc")]),
        .target(name: "Allocator", dependencies: ["CAllocator"], swiftSettings: strictSettings),
        .target(name: "Common", dependencies: ["Threading", "COpenSSL"], swiftSettings: strictSettings),
        // Thin wrappers over SQLite and libpq: the only modules of the queue that see their C types. PostgresDriver
        // takes Common for `Duration.wholeMilliseconds` alone (its session timeouts are Durations).
        // SQLite's unix VFS with the WAL frames a COMMIT writes sent in one call: a C target, as a VFS is
        // a table of C callbacks (Sources/CSQLiteWALBuffer/wal_buffer.c says why it is safe).
        .target(name: "CSQLiteWALBuffer", dependencies: ["CSQLite"]),
        .target(name: "SQLiteDriver", dependencies: ["CSQLite", "CSQLiteWALBuffer"], swiftSettings: strictSettings),
        .target(name: "PostgresDriver", dependencies: ["Common", "CLibPQ"], swiftSettings: strictSettings),
        .target(name: "Queue", dependencies: ["Common", "Threading", "SQLiteDriver", "PostgresDriver"], swiftSettings: strictSettings),
        .target(name: "Ingest", dependencies: ["Common", "Queue", "Threading", "CMicroHTTPD"], swiftSettings: strictSettings),
        // Plumbing shared by the APNs client and the simulator: event loop, TLS over memory BIOs, HTTP/2 sessions.
        .target(name: "HTTP2", dependencies: ["Threading", "CNGHTTP2", "COpenSSL", "CLinux"], swiftSettings: strictSettings),
        .target(name: "Deliver", dependencies: ["Common", "Queue", "HTTP2", "Threading"], swiftSettings: strictSettings),
        // systemd's daemon interface: socket activation, READY/STOPPING/WATCHDOG notifications.
        .target(name: "Systemd", dependencies: ["Threading", "CSystemd"], swiftSettings: strictSettings),
        // The APNs simulator behind `kumapush-relay apns-sim`, also used in-process by the delivery tests.
        .target(name: "Simulator", dependencies: ["Common", "HTTP2"], swiftSettings: strictSettings),
        .executableTarget(
            name: "KumaPushRelay",
            dependencies: ["Common", "Queue", "Ingest", "Deliver", "HTTP2", "Simulator", "Systemd", "Allocator"],
            swiftSettings: strictSettings
        ),

        // `make bench` helpers. QueueBench links the binary's allocator: its floor is the deliverer's own queue work.
        .executableTarget(
            name: "QueueBench", dependencies: ["Common", "Queue", "SQLiteDriver", "CSQLite", "CAllocator"], path: "bench/QueueBench",
            swiftSettings: strictSettings),

        // Tests. QueueProbe is a helper process the queue tests start, kill and race against each other.
        .executableTarget(
            name: "QueueProbe", dependencies: ["Common", "Queue"], path: "Tests/QueueProbe",
            swiftSettings: strictSettings),
        // Ignores SIGPIPE in the test runner before any test starts, as the binary does for itself.
        .target(name: "TestRunnerSignals", path: "Tests/TestRunnerSignals"),
        .target(
            name: "TestSupport", dependencies: ["CSQLite", "CLibPQ", "Common", "Queue", "TestRunnerSignals"], path: "Tests/TestSupport",
            swiftSettings: strictSettings),
        .testTarget(name: "CommonTests", dependencies: ["Common"], swiftSettings: strictSettings),
        .testTarget(name: "ThreadingTests", dependencies: ["Threading"], swiftSettings: strictSettings),
        .testTarget(name: "SystemdTests", dependencies: ["Systemd", "Threading"], swiftSettings: strictSettings),
        .testTarget(
            name: "DeliverTests", dependencies: ["Common", "Queue", "HTTP2", "Deliver", "Simulator", "TestSupport"],
            swiftSettings: strictSettings),
        .testTarget(name: "HTTP2Tests", dependencies: ["HTTP2", "TestSupport"], swiftSettings: strictSettings),
        .testTarget(name: "IngestTests", dependencies: ["Common", "Queue", "Ingest", "TestSupport", "Threading"], swiftSettings: strictSettings),
        .testTarget(
            name: "QueueTests", dependencies: ["Common", "Queue", "SQLiteDriver", "PostgresDriver", "TestSupport", "CSQLite", "CSQLiteWALBuffer"],
            swiftSettings: strictSettings)
    ],
    swiftLanguageModes: [.v6]
)

// `make fuzz` only: libFuzzer targets, built with -sanitize=fuzzer into their own build folder (scripts/fuzz.sh).
// They have no main (libFuzzer brings it), so they exist only when asked for.
if ProcessInfo.processInfo.environment["KUMAPUSH_FUZZ"] == "1" {
    package.targets.append(
        .executableTarget(
            name: "FuzzTargets", dependencies: ["Common", "Ingest", "Deliver"],
            path: "fuzz/Sources/FuzzTargets", swiftSettings: strictSettings))
}
