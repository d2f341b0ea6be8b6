// swift-tools-version:5.3
// Fuzz targets for the parsers of untrusted bytes, a package of its own as swift-protobuf's
// FuzzTesting/ is: each target is a small executable that libFuzzer drives, built with
//   swift build -c release -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library
// scripts/fuzz.sh builds and runs them; scripts/fuzz-smoke.sh is the short run for CI.
// Tools version 5.3, as swift-protobuf's FuzzTesting: a `.target` holding main.swift is an
// executable whose `main` is not renamed, so libFuzzer's own `main` links in its place.

import PackageDescription

let package = Package(
    name: "FuzzTesting",
    dependencies: [
        .package(name: "SandboxedPlugins", path: ".."),
        .package(name: "PluginSDK", path: "../SDK"),
    ],
    targets: [
        .target(
            name: "FuzzFrameDecoder",
            dependencies: [.product(name: "PluginProtocol", package: "PluginSDK")]),
        .target(
            name: "FuzzEnvelope",
            dependencies: [.product(name: "PluginProtocol", package: "PluginSDK")]),
        .target(
            name: "FuzzManifest",
            dependencies: [
                .product(name: "Bundles", package: "SandboxedPlugins"),
                .product(name: "PluginProtocol", package: "PluginSDK"),
            ]),
        .target(
            name: "FuzzCatalog",
            dependencies: [.product(name: "Bundles", package: "SandboxedPlugins")]),
    ]
)
