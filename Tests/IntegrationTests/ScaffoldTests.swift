import Foundation
import PluginProtocol
import Testing

/// `supervisor new` (SPEC §6): a bundle that builds with the command it prints and answers under
/// `supervisor start --plugins`. The Swift one builds against the SDK package alone.
@Suite(.serialized, .timeLimit(.minutes(5)))
struct ScaffoldTests {
    /// Runs `supervisor new` and then the build line it printed (`Build it:  cd <dir> && <command>`).
    func makeAndBuild(_ id: String, lang: String, in w: TestWorld) throws -> String {
        let folder = w.plugins + "/" + id
        let made = try Shell.run(Build.supervisor, ["new", id, "--lang", lang, "--output", folder])
        #expect(made.code == 0, "\(made.err)")
        #expect(made.out.contains("Run it:    supervisor start --plugins \(w.plugins)"), "\(made.out)")
        #expect(made.out.contains("Call it:   supervisor call \(id) hello"))
        let line = try #require(made.out.split(separator: "\n").first { $0.hasPrefix("Build it:") }, "\(made.out)")
        let command = line.dropFirst("Build it:".count).trimmingCharacters(in: .whitespaces)
        #expect(command.hasPrefix("cd \(folder) && "), "\(command)")
        // The author's own shell: no variables of this test run's build leak into theirs.
        var env = ["PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin", "HOME": w.root]
        env["TMPDIR"] = w.root
        let built = try Shell.run("/bin/sh", ["-c", command], env: env, timeout: 600)
        #expect(built.code == 0, "\(command) failed:\n\(built.out)\n\(built.err)")
        #expect(!built.out.contains("warning:") && !built.err.contains("warning:"), "the build warns:\n\(built.out)\(built.err)")
        return folder
    }

    @Test("supervisor new makes a Swift and a C plugin; each builds with the printed command and answers hello, sandboxed")
    func newPluginsBuildAndAnswer() throws {
        let w = try TestWorld()
        let swift = try makeAndBuild("com.test.swifty", lang: "swift", in: w)
        _ = try makeAndBuild("com.test.cee", lang: "c", in: w)
        // The Swift package resolved nothing but the SDK: no server library was fetched.
        let resolved = (try? FileManager.default.contentsOfDirectory(atPath: swift + "/.build/checkouts")) ?? []
        #expect(resolved.isEmpty, "fetched: \(resolved)")
        let sv = try RunningSupervisor(w)
        for id in ["com.test.swifty", "com.test.cee"] {
            let r = try sv.cli("call", id, "hello")
            #expect(r.code == 0 && r.out.contains("Hello from \(id)!"), "\(id): \(r.out)\(r.err)")
            let p = try sv.plugin(id)
            #expect(p.state == "running" && p.sandbox.contains("seccomp") && p.sandbox.contains("landlock"), "\(p)")
        }
        // A folder that is not empty is refused, and nothing in it is touched.
        let again = try Shell.run(Build.supervisor, ["new", "com.test.swifty", "--output", swift])
        #expect(again.code != 0 && again.err.contains("exists and is not an empty folder"), "\(again.err)")
        let bad = try Shell.run(Build.supervisor, ["new", "not an id"])
        #expect(bad.code != 0 && bad.err.contains("is not a plugin identifier"), "\(bad.err)")
    }

    @Test("the SDK published with scripts/publish-sdk.sh is usable by URL: a plugin depending on it builds and answers")
    func sdkByURL() throws {
        let w = try TestWorld()
        let repository = w.root + "/plugin-sdk.git"
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("scripts/publish-sdk.sh").path
        let published = try Shell.run(script, [repository, "1.0.0"])
        #expect(published.code == 0, "\(published.err)")
        let folder = w.plugins + "/byurl"
        #expect(try Shell.run(Build.supervisor, ["new", "com.test.byurl", "--output", folder]).code == 0)
        // What the author changes: the dependency by path becomes one by URL.
        var package = try String(contentsOfFile: folder + "/Package.swift", encoding: .utf8)
        let byPath = try #require(package.split(separator: "\n").first { $0.contains(".package(path:") })
        package = package.replacingOccurrences(of: String(byPath), with: #"        .package(url: "file://\#(repository)", from: "1.0.0"),"#)
            .replacingOccurrences(of: #"package: "SDK""#, with: #"package: "plugin-sdk""#)
        try package.write(toFile: folder + "/Package.swift", atomically: true, encoding: .utf8)
        let env = ["PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin", "HOME": w.root, "TMPDIR": w.root]
        // A debug build: what is tested is that the SDK resolves and builds by URL (the release
        // build of the printed command is the test above's).
        let built = try Shell.run("/bin/sh", ["-c", "cd '\(folder)' && swift build && cp .build/debug/libByurl.so ."], env: env, timeout: 600)
        #expect(built.code == 0, "\(built.out)\(built.err)")
        let sv = try RunningSupervisor(w)
        #expect(try sv.call("com.test.byurl", "hello", as: String.self) == "Hello from com.test.byurl!")
    }
}
