// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "SandboxedPlugins",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "supervisor", targets: ["supervisor"]),
        .executable(name: "plugin-worker", targets: ["PluginWorker"]),
        .executable(name: "supervisor-bench", targets: ["Benchmark"]),
        .executable(name: "supervisor-installer", targets: ["InstallerTool"]),
        .library(name: "PluginSDK", targets: ["PluginSDK"]),
        // The wire protocol and the bundle model, for tools of one's own (and the fuzz targets in
        // FuzzTesting/, a package of its own).
        .library(name: "PluginProtocol", targets: ["PluginProtocol"]),
        .library(name: "Bundles", targets: ["Bundles"]),
        // Example plugins: each one is a shared library loaded by a worker.
        .library(name: "Greeter", type: .dynamic, targets: ["Greeter"]),
        .library(name: "Welcome", type: .dynamic, targets: ["Welcome"]),
        .library(name: "AsyncWorks", type: .dynamic, targets: ["AsyncWorks"]),
        // Test fixture: one library the integration tests load under many manifests.
        .library(name: "TestKit", type: .dynamic, targets: ["TestKit"]),
        // Test fixture: a Swift plugin without its `@_cdecl` export.
        .library(name: "NoExport", type: .dynamic, targets: ["NoExport"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.80.0"),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.12.0"),
        // Operations (docs/operations.md): Prometheus metrics (swift-prometheus, whose metric types
        // are swift-metrics handlers) and W3C trace context. With their own dependencies they add
        // about 9 s to a clean build on two cores.
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.1.0"),
        .package(url: "https://github.com/swift-otel/swift-w3c-trace-context", from: "1.0.0"),
    ],
    targets: [
        // The C ABI between a worker and a plugin library (include/sp_plugin.h).
        .target(name: "CPluginABI", path: "Sources/CPluginABI"),
        // The Linux calls Swift cannot make directly (variadic syscall/prctl, posix_spawn, pidfds,
        // futexes), for every process: imported only by LinuxSupport.
        .target(name: "CLinuxSupport", path: "Sources/CLinuxSupport"),
        // The sandbox in C (the worker's, and the installer's): Landlock, namespaces, capabilities,
        // rlimits, loading a seccomp filter with a listener, the SIGSYS reporter.
        .target(name: "CSandboxSupport", dependencies: ["CLinuxSupport"], path: "Sources/CSandboxSupport"),
        // libseccomp, Debian's libseccomp-dev.
        .systemLibrary(name: "CSeccomp", path: "Sources/CSeccomp", pkgConfig: "libseccomp", providers: [.apt(["libseccomp-dev"])]),
        // libcurl (Debian's libcurl4-openssl-dev) and libarchive (libarchive-dev) for installs.
        .systemLibrary(name: "CCurl", path: "Sources/CCurl", pkgConfig: "libcurl", providers: [.apt(["libcurl4-openssl-dev"])]),
        .systemLibrary(name: "CArchive", path: "Sources/CArchive", pkgConfig: "libarchive", providers: [.apt(["libarchive-dev"])]),
        // The libcurl transfer (configured in C: curl_easy_setopt is variadic).
        .target(name: "CInstallSupport", dependencies: ["CCurl"], path: "Sources/CInstallSupport"),

        // The wire format, the messages and the vocabulary every process shares.
        .target(name: "PluginProtocol", path: "Sources/Protocol"),
        // The Linux shim: the syscall funnel, owned descriptors, files, processes (posix_spawn,
        // pidfds), signals, prctl.
        .target(name: "LinuxSupport", dependencies: ["CLinuxSupport"], path: "Sources/Linux"),
        // Blocking framed connections (worker, CLI, installer preflight).
        .target(name: "IPC", dependencies: ["PluginProtocol", "LinuxSupport"], path: "Sources/IPC"),
        // Plugin bundles on disk: manifests, versions, the dependency graph, variants, the bundle
        // store, the home lock, the installer's request and answer. Shared by the supervisor and the
        // installer; links no SwiftNIO.
        .target(name: "Bundles", dependencies: ["PluginProtocol", "LinuxSupport"], path: "Sources/Bundles"),
        .target(
            name: "PluginSDK",
            dependencies: ["CPluginABI", "PluginProtocol"],
            path: "Sources/PluginSDK"
        ),
        // Landlock and seccomp filters in Swift, for the worker and the installer.
        .target(name: "Confinement", dependencies: ["CSandboxSupport", "CSeccomp", "LinuxSupport", "PluginProtocol"], path: "Sources/Confinement"),
        .executableTarget(
            name: "PluginWorker",
            dependencies: ["CPluginABI", "CSandboxSupport", "Confinement", "PluginProtocol", "IPC", "LinuxSupport"],
            path: "Sources/PluginWorker"
        ),
        .target(
            name: "SupervisorKit",
            dependencies: [
                "PluginProtocol", "IPC", "LinuxSupport", "Bundles", "CSeccomp",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "W3CTraceContext", package: "swift-w3c-trace-context"),
            ],
            path: "Sources/Supervisor/Kit"
        ),
        // Downloads, archive checks, signatures and preflight: everything that parses untrusted
        // input for installs, run by the supervisor as a separate process (supervisor-installer).
        // It depends on the bundle model, never on the supervisor.
        .target(
            name: "PluginInstall",
            dependencies: [
                "Bundles", "IPC", "LinuxSupport", "PluginProtocol", "CInstallSupport", "CArchive",
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            path: "Sources/Install"
        ),
        .executableTarget(
            name: "InstallerTool",
            dependencies: ["PluginInstall", "Bundles", "Confinement", "LinuxSupport", "PluginProtocol"],
            path: "Sources/InstallerTool"
        ),
        .executableTarget(
            name: "supervisor",
            dependencies: [
                "SupervisorKit", "Bundles", "LinuxSupport", "IPC", "PluginProtocol",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Sources/Supervisor/CLI"
        ),

        // The benchmark: real supervisor, real workers and plugins, baselines measured in the same run.
        .executableTarget(
            name: "Benchmark",
            dependencies: ["IPC", "PluginProtocol"],
            path: "Sources/Benchmark"
        ),

        // Example plugins (Swift). The C example is built with plain `cc` by scripts/build-examples.sh.
        .target(name: "Greeter", dependencies: ["PluginSDK"], path: "Examples/Greeter"),
        .target(name: "Welcome", dependencies: ["PluginSDK"], path: "Examples/Welcome"),
        .target(name: "AsyncWorks", dependencies: ["PluginSDK"], path: "Examples/AsyncWorks"),

        .target(name: "TestKit", dependencies: ["PluginSDK"], path: "Tests/Fixtures/TestKit"),
        .target(name: "NoExport", dependencies: ["PluginSDK"], path: "Tests/Fixtures/NoExport"),

        .testTarget(
            name: "UnitTests",
            dependencies: ["PluginProtocol", "IPC", "LinuxSupport", "Bundles", "SupervisorKit", .product(name: "NIOCore", package: "swift-nio")],
            path: "Tests/UnitTests"
        ),
        .testTarget(
            name: "IntegrationTests",
            dependencies: ["PluginProtocol", "IPC", "LinuxSupport", "Bundles", .product(name: "Crypto", package: "swift-crypto")],
            path: "Tests/IntegrationTests"
        ),
    ],
    swiftLanguageModes: [.v6]
)
