// swift-tools-version:6.1
// A host program (docs/host.md): PluginHost in a ServiceGroup beside an HTTP server on SwiftNIO,
// serving `GET /plugins/<id>/<path>?<query>` by opening `plugin://<id>/<path>?<query>`. A package of
// its own, as a user's program is; everything it uses beside PluginHost (SwiftNIO, swift-log,
// swift-service-lifecycle) PluginHost brings already, so it adds one module to a build.
import Foundation
import PackageDescription

// The supervisor's package, by path; its identity is its folder's name, whatever the clone is called.
let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../..").standardizedFileURL
let supervisorPackage = root.lastPathComponent.lowercased()

let package = Package(
    name: "HostHTTP",
    platforms: [.macOS(.v14)],
    dependencies: [
        .package(path: root.path),
        .package(url: "https://github.com/apple/swift-nio", from: "2.80.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.6.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
    ],
    targets: [
        .executableTarget(
            name: "HostHTTP",
            dependencies: [
                .product(name: "PluginHost", package: supervisorPackage),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Sources/HostHTTP"
        ),
    ],
    swiftLanguageModes: [.v6]
)
