import Foundation
import PluginProtocol
import Testing

/// The Rust and Go examples (docs/languages.md), built with the commands the docs give, answer
/// calls sandboxed like any plugin.
@Suite(.serialized, .timeLimit(.minutes(5)))
struct LanguageTests {
    static let examples = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("examples").path

    /// examples/RustHello with cargo (offline: it uses std only).
    static func rustExample() throws -> String {
        let target = Build.dir + "/examples-rust"
        let r = try Shell.run("/usr/bin/env", ["cargo", "build", "--release", "--offline", "--manifest-path", examples + "/RustHello/Cargo.toml",
                                               "--target-dir", target], env: ProcessInfo.processInfo.environment, timeout: 300)
        guard r.code == 0 else { throw HarnessError("cargo build failed (scripts/install-deps.sh --tests installs cargo): \(r.err)") }
        return target + "/release/librusthello.so"
    }

    /// examples/GoHello with `go build -buildmode=c-shared` (Debian's golang-go; the standard library only).
    static func goExample() throws -> String {
        try Build.goSharedLibrary(examples + "/GoHello", into: "examples-go", named: "libgohello.so")
    }

    @Test("the Rust cdylib and Go c-shared examples answer hello and add, sandboxed; a bad call is a clear error")
    func rustAndGoAnswer() throws {
        let w = try TestWorld()
        try w.bundle("com.example.rusthello", library: try Self.rustExample())
        try w.bundle("com.example.gohello", library: try Self.goExample())
        let sv = try RunningSupervisor(w)
        for (id, language) in [("com.example.rusthello", "Rust"), ("com.example.gohello", "Go")] {
            #expect(try sv.call(id, "hello", as: String.self) == "Hello from \(language)!")
            #expect(try sv.call(id, "add", "[40, 2]", as: Int.self) == 42)
            let bad = try sv.cli("call", id, "add", #"["x"]"#)
            #expect(bad.code != 0 && bad.err.contains("badRequest: add takes [a, b]"), "\(id): \(bad.err)")
            let missing = try sv.cli("call", id, "nope")
            #expect(missing.code != 0 && missing.err.contains("notFound"), "\(id): \(missing.err)")
            let p = try sv.plugin(id)
            #expect(p.state == "running" && p.sandbox.contains("seccomp") && p.sandbox.contains("landlock") && p.restarts == 0, "\(p)")
        }
    }
}
