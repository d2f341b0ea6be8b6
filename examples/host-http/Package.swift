// swift-tools-version:6.1
// A host program (docs/host.md): PluginHost in a ServiceGroup beside a Hummingbird 2 HTTP server,
// serving `GET /plugins/<id>/<path>?<query>` by opening `plugin://<id>/<path>?<query>`. A package of
// its own: Hummingbird and its dependencies add minutes to a clean build, which the supervisor's
// own package does not pay.
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
        // Without its default traits (swift-configuration, full Foundation): what the example needs.
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.0.0", traits: []),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.6.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
    ],
    targets: [
        .executableTarget(
            name: "HostHTTP",
            dependencies: [
                .product(name: "PluginHost", package: supervisorPackage),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Sources/HostHTTP"
        ),
    ],
    swiftLanguageModes: [.v6]
)
