// swift-tools-version:6.0
// The plugin SDK (SPEC §11): everything a plugin needs and nothing else. A plugin author's package
// depends on this one alone (by path: `.package(path: "<clone>/SDK")`), so its `swift build`
// fetches no server library: no SwiftNIO, no crypto, no Prometheus.
//
// - CPluginABI: sp_plugin.h, the C ABI between a worker and a plugin library (C, Rust, Go, Swift).
// - PluginProtocol: the wire format, messages and vocabulary (the supervisor uses the same module).
// - PluginSDK: `Pluggable`, `PluginAPI`, `PluginContext`, `PluginExport` for Swift plugins.
import PackageDescription

let package = Package(
    name: "PluginSDK",
    products: [
        .library(name: "PluginSDK", targets: ["PluginSDK"]),
        .library(name: "PluginProtocol", targets: ["PluginProtocol"]),
        .library(name: "CPluginABI", targets: ["CPluginABI"]),
    ],
    dependencies: [
        // `swift package generate-documentation` (scripts/docs.sh). `swift build` compiles its two
        // plugin scripts once per build folder and nothing else of it; a plugin's package, which
        // depends on this one, neither fetches nor builds it.
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
    ],
    targets: [
        .target(name: "CPluginABI", path: "Sources/CPluginABI"),
        .target(name: "PluginProtocol", path: "Sources/PluginProtocol"),
        .target(name: "PluginSDK", dependencies: ["CPluginABI", "PluginProtocol"], path: "Sources/PluginSDK"),
    ],
    swiftLanguageModes: [.v6]
)
