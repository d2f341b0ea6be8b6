// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "SandboxedPlugins",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "supervisor", targets: ["SupervisorCLI"]),
        .executable(name: "plugin-worker", targets: ["PluginWorkerExec"]),
        // The fork server (`workerStart: "fork-server"`, docs/sandbox.md): a C process that loads the
        // worker's code (libPluginWorkerCore.so) once and forks each worker from it.
        .executable(name: "plugin-forkserver", targets: ["ForkServer"]),
        .library(name: "PluginWorkerCore", type: .dynamic, targets: ["PluginWorker"]),
        .executable(name: "supervisor-bench", targets: ["Benchmark"]),
        .executable(name: "supervisor-installer", targets: ["InstallerTool"]),
        // The bundle model, for tools of one's own (and the fuzz targets in FuzzTesting/, a package
        // of its own). The plugin SDK and the wire protocol are the SDK/ package's products.
        .library(name: "Bundles", targets: ["Bundles"]),
        // A program's connection to a running `supervisor start` (SPEC §12), and the control
        // protocol it speaks: no SwiftNIO, no supervisor.
        .library(name: "SupervisorClient", targets: ["SupervisorClient"]),
        // The supervisor inside a Swift program (SPEC §12): a swift-service-lifecycle Service.
        .library(name: "PluginHost", targets: ["PluginHost"]),
        // The README's PluginHost program (scripts/check-readme.sh runs it).
        .executable(name: "host-hello", targets: ["HostHello"]),
        // Example plugins: each one is a shared library loaded by a worker.
        .library(name: "Greeter", type: .dynamic, targets: ["Greeter"]),
        .library(name: "Welcome", type: .dynamic, targets: ["Welcome"]),
        .library(name: "AsyncWorks", type: .dynamic, targets: ["AsyncWorks"]),
        // Test fixture: one library the integration tests load under many manifests.
        .library(name: "TestKit", type: .dynamic, targets: ["TestKit"]),
        // Test fixture: a Swift plugin without its `@_cdecl` export.
        .library(name: "NoExport", type: .dynamic, targets: ["NoExport"]),
        // The benchmark's plugin→plugin caller in C (supervisor-bench).
        .library(name: "CRelay", type: .dynamic, targets: ["CRelay"]),
    ],
    dependencies: [
        // The plugin SDK, a package of its own (SPEC §11): the C ABI, the wire protocol, the Swift SDK.
        .package(path: "SDK"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.80.0"),
        // Operations (docs/operations.md): Prometheus metrics (swift-prometheus, whose metric types
        // are swift-metrics handlers) and W3C trace context. With their own dependencies they add
        // about 9 s to a clean build on two cores.
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        // swift-metrics (already swift-prometheus's): an embedded host reports through the
        // program's backend; MetricsTestKit for its test.
        .package(url: "https://github.com/apple/swift-metrics", from: "2.4.0"),
        .package(url: "https://github.com/swift-otel/swift-w3c-trace-context", from: "1.0.0"),
        // PluginHost is a `Service` (docs/host.md): with swift-async-algorithms, about 25 s of a
        // clean build on two cores.
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.6.0"),
        // Random input sequences for the core's tests (Tests/CoreTests): no dependencies of its own.
        .package(url: "https://github.com/x-sheep/swift-property-based", from: "2.0.0"),
        // `swift package generate-documentation` (scripts/docs.sh). `swift build` compiles its two
        // plugin scripts once per build folder (seconds) and nothing else of it.
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
    ],
    targets: [
        // The Linux calls Swift cannot make directly (variadic syscall/prctl, posix_spawn, pidfds,
        // futexes), for every process: mostly through LinuxSupport; IPC's send path, the
        // supervisor's peer links and the test harness's spawn import it for a call or two.
        .target(name: "CLinuxSupport", path: "Sources/CLinuxSupport"),
        // The sandbox in C (the worker's, and the installer's): Landlock, namespaces, capabilities,
        // rlimits, loading a seccomp filter with a listener, the SIGSYS reporter.
        .target(name: "CSandboxSupport", dependencies: ["CLinuxSupport"], path: "Sources/CSandboxSupport"),
        // libseccomp, Debian's libseccomp-dev.
        .systemLibrary(name: "CSeccomp", path: "Sources/CSeccomp", pkgConfig: "libseccomp", providers: [.apt(["libseccomp-dev"])]),
        // libcurl (Debian's libcurl4-openssl-dev) and libarchive (libarchive-dev) for installs.
        .systemLibrary(name: "CCurl", path: "Sources/CCurl", pkgConfig: "libcurl", providers: [.apt(["libcurl4-openssl-dev"])]),
        .systemLibrary(name: "CArchive", path: "Sources/CArchive", pkgConfig: "libarchive", providers: [.apt(["libarchive-dev"])]),
        // Ed25519 and SHA-256 from the system's OpenSSL (libssl-dev): libcurl loads its libcrypto
        // anyway, and a crypto package of our own would compile BoringSSL on every clean build.
        .systemLibrary(name: "CCrypto", path: "Sources/CCrypto", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),
        // The libcurl transfer (configured in C: curl_easy_setopt is variadic).
        .target(name: "CInstallSupport", dependencies: ["CCurl"], path: "Sources/CInstallSupport"),

        // The Linux shim: the syscall funnel, owned descriptors, files, processes (posix_spawn,
        // pidfds), signals, prctl. Its locks are PluginProtocol's `Guarded`.
        .target(name: "LinuxSupport", dependencies: ["CLinuxSupport", .product(name: "PluginProtocol", package: "SDK")], path: "Sources/LinuxSupport"),
        // The control protocol (client ⇄ supervisor): where a supervisor is, the requests' answers
        // (status, send, reload, update, progress). Values only; shared by the supervisor, the CLI
        // and the client libraries. The plugin wire protocol is the SDK's PluginProtocol.
        .target(name: "Protocol", dependencies: [.product(name: "PluginProtocol", package: "SDK"), "CLinuxSupport"], path: "Sources/Protocol"),
        // Blocking framed connections (worker, CLI, installer preflight).
        .target(name: "IPC", dependencies: [.product(name: "PluginProtocol", package: "SDK"), "CLinuxSupport", "LinuxSupport"], path: "Sources/IPC"),
        // Plugin bundles on disk: manifests, versions, the dependency graph, variants, the bundle
        // store, the home lock, the installer's request and answer (its progress is the control
        // protocol's, Protocol, passed on as it is). Shared by the supervisor and the installer; links
        // no SwiftNIO.
        .target(name: "Bundles", dependencies: ["BundleModel", .product(name: "PluginProtocol", package: "SDK"), "LinuxSupport", "Protocol"], path: "Sources/Bundles"),
        // The bundle model's values: a manifest, parsed and validated from its bytes, and versions.
        // No file system: the supervisor's core decides with them.
        .target(name: "BundleModel", dependencies: [.product(name: "PluginProtocol", package: "SDK")], path: "Sources/BundleModel"),
        // Every decision of the supervisor, as values that take inputs and return actions
        // (docs/architecture.md): no I/O, no clock, no NIO, no Linux calls. SupervisorKit drives it.
        .target(name: "SupervisorCore", dependencies: ["BundleModel", "CallTracking", .product(name: "PluginProtocol", package: "SDK")],
                path: "Sources/SupervisorCore"),
        // The caller's side of a call, one table for every caller: the supervisor's calls to its
        // workers, a worker's calls over peer links, a program's over direct links (ids, deadlines,
        // each call settled once) and a stream's credit. Values, no I/O, no clock.
        .target(name: "CallTracking", dependencies: [.product(name: "PluginProtocol", package: "SDK")], path: "Sources/CallTracking"),
        // The control socket's client (the CLI's, and a host program's): over IPC, speaks Protocol.
        .target(name: "SupervisorClient", dependencies: ["IPC", "Protocol", "LinuxSupport", "CLinuxSupport", "CallTracking", .product(name: "PluginProtocol", package: "SDK"),
                                                         .product(name: "CPluginABI", package: "SDK")], path: "Sources/SupervisorClient"),
        // Landlock and seccomp filters in Swift, for the worker and the installer.
        .target(name: "Confinement", dependencies: ["CSandboxSupport", "CSeccomp", "LinuxSupport", .product(name: "PluginProtocol", package: "SDK")], path: "Sources/Confinement"),
        // The worker's code, entered at `sp_worker_main`: linked into `plugin-worker` and into every
        // host program (PluginHost), and loaded as libPluginWorkerCore.so by the fork server.
        .target(
            name: "PluginWorker",
            dependencies: [.product(name: "CPluginABI", package: "SDK"), "CLinuxSupport", "CSandboxSupport", "Confinement", .product(name: "PluginProtocol", package: "SDK"), "IPC", "LinuxSupport",
                           "CallTracking"],
            path: "Sources/PluginWorker"
        ),
        .executableTarget(name: "PluginWorkerExec", dependencies: ["PluginWorker"], path: "Sources/PluginWorkerExec"),
        // The fork server's loop, plain C, no Swift code runs in it: for `plugin-forkserver`, which
        // dlopens the worker's library, and for a host program's own executable (CProcessRoles).
        .target(name: "CForkServer", dependencies: ["CLinuxSupport"], path: "Sources/CForkServer", linkerSettings: [.linkedLibrary("dl")]),
        .executableTarget(name: "ForkServer", dependencies: ["CForkServer"], path: "Sources/ForkServer"),
        // A host program's executable started as its own worker or fork server: a constructor that
        // diverts the process before `main` (docs/host.md, "Binaries").
        .target(name: "CProcessRoles", dependencies: ["CForkServer"], path: "Sources/CProcessRoles"),
        .target(
            name: "SupervisorKit",
            dependencies: [
                "SupervisorCore",
                .product(name: "PluginProtocol", package: "SDK"), .product(name: "CPluginABI", package: "SDK"), "Protocol", "IPC", "LinuxSupport", "Bundles", "CSeccomp", "Confinement",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "W3CTraceContext", package: "swift-w3c-trace-context"),
            ],
            path: "Sources/SupervisorKit"
        ),
        // The supervisor as a library for a host program (docs/host.md).
        .target(
            name: "PluginHost",
            dependencies: [
                "SupervisorClient", "PluginWorker", "CProcessRoles",
                "SupervisorKit", "Protocol", "LinuxSupport", .product(name: "PluginProtocol", package: "SDK"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
            ],
            path: "Sources/PluginHost"
        ),
        // Downloads, archive checks, signatures and preflight: everything that parses untrusted
        // input for installs, run by the supervisor as a separate process (supervisor-installer).
        // It depends on the bundle model, never on the supervisor.
        .target(
            name: "PluginInstall",
            dependencies: [
                "Bundles", "IPC", "LinuxSupport", .product(name: "PluginProtocol", package: "SDK"), "CInstallSupport", "CArchive", "CCrypto",
            ],
            path: "Sources/PluginInstall"
        ),
        .executableTarget(
            name: "InstallerTool",
            dependencies: ["PluginInstall", "Bundles", "Confinement", "LinuxSupport", .product(name: "PluginProtocol", package: "SDK")],
            path: "Sources/InstallerTool"
        ),
        .executableTarget(
            name: "SupervisorCLI",
            dependencies: [
                "SupervisorKit", "SupervisorClient", "Protocol", "Bundles", "LinuxSupport", "IPC", .product(name: "PluginProtocol", package: "SDK"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Sources/SupervisorCLI"
        ),

        // The benchmark: real supervisor, real workers and plugins, baselines measured in the same run.
        .executableTarget(
            name: "Benchmark",
            dependencies: ["IPC", "Protocol", "PluginHost", "SupervisorClient", "SupervisorKit", .product(name: "PluginProtocol", package: "SDK"),
                           .product(name: "Logging", package: "swift-log")],
            path: "Sources/Benchmark"
        ),

        // Example plugins (Swift). The C example is built with plain `cc` by scripts/build-examples.sh.
        .target(name: "Greeter", dependencies: [.product(name: "PluginSDK", package: "SDK")], path: "examples/Greeter"),
        .target(name: "Welcome", dependencies: [.product(name: "PluginSDK", package: "SDK")], path: "examples/Welcome"),
        .target(name: "AsyncWorks", dependencies: [.product(name: "PluginSDK", package: "SDK")], path: "examples/AsyncWorks"),
        // A host program (docs/host.md): the README's twenty lines.
        .executableTarget(name: "HostHello", dependencies: ["PluginHost", .product(name: "Logging", package: "swift-log")], path: "examples/HostHello"),

        // Test fixture: a program embedding the supervisor with handlesSignals in an async main.
        .executableTarget(name: "HostSignals", dependencies: ["PluginHost", .product(name: "Logging", package: "swift-log")], path: "Tests/Fixtures/HostSignals"),
        .target(name: "TestKit", dependencies: [.product(name: "PluginSDK", package: "SDK")], path: "Tests/Fixtures/TestKit"),
        .target(name: "NoExport", dependencies: [.product(name: "PluginSDK", package: "SDK")], path: "Tests/Fixtures/NoExport"),
        .target(name: "CRelay", dependencies: [.product(name: "CPluginABI", package: "SDK")], path: "Benchmarks/CRelay"),

        // The core's tests: its decisions driven with inputs, no process, socket or clock.
        .testTarget(name: "CoreTests", dependencies: ["SupervisorCore", .product(name: "PropertyBased", package: "swift-property-based")],
                    path: "Tests/CoreTests"),
        .testTarget(
            name: "UnitTests",
            dependencies: [.product(name: "PluginProtocol", package: "SDK"), .product(name: "PluginSDK", package: "SDK"), "IPC", "LinuxSupport", "Bundles", "Protocol",
                           "SupervisorKit", "PluginWorker", "PluginInstall", .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOEmbedded", package: "swift-nio")],
            path: "Tests/UnitTests"
        ),
        .testTarget(
            name: "IntegrationTests",
            dependencies: [.product(name: "PluginProtocol", package: "SDK"), "IPC", "LinuxSupport", "Bundles", "Protocol", "PluginHost", "SupervisorClient", .product(name: "CPluginABI", package: "SDK"),
                           .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"), .product(name: "Logging", package: "swift-log"),
                           .product(name: "MetricsTestKit", package: "swift-metrics"), "PluginInstall"],
            path: "Tests/IntegrationTests"
        ),
    ],
    swiftLanguageModes: [.v6]
)
