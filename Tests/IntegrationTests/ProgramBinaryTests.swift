import Foundation
import Logging
import PluginHost
import Protocol
import Testing

/// A host program as its own workers' and fork server's binary (docs/host.md, "Binaries"): a
/// package that depends on PluginHost builds no `plugin-worker`, and its program runs its plugins
/// from its own executable, which a constructor diverts to the worker or the fork server before
/// `main`. This test process is such a program (it links PluginHost); its workers here are this
/// very executable started again. scripts/check-host-example.sh does the same as a user does: a
/// package outside the repository, a plain `swift build`, no variable set.
@Suite(.serialized, .timeLimit(.minutes(3)))
struct ProgramBinaryTests {
    /// What one worker looks like from outside.
    struct Seen: Equatable {
        var layers: Set<String>
        var missing: Set<String>
    }

    /// Runs a host over `world`'s plugins, `tune`d, and reads each worker as the supervisor and
    /// the system see it; every plugin must answer a call first.
    static func workers(_ world: TestWorld, _ tune: (inout PluginHost.Configuration) -> Void) async throws -> [String: (PluginStatus, Seen)] {
        var configuration = PluginHost.Configuration(pluginFolders: [world.plugins], home: world.home)
        tune(&configuration)
        var logger = Logger(label: "program-binary-test")
        logger.logLevel = .warning
        let host = PluginHost(configuration: configuration, logger: logger)
        let running = Task { try await host.run() }
        var seen: [String: (PluginStatus, Seen)] = [:]
        do {
            try await host.waitUntilReady()
            for p in try await host.status() {
                #expect(try await host.call(p.identifier, "echo", 5, as: Int.self) == 5)
                seen[p.identifier] = (p, Seen(layers: Set(p.sandbox), missing: Set((p.sandboxMissing ?? []).map { String($0.prefix { $0 != ":" }) })))
            }
            for (_, (p, _)) in seen {
                let pid = try #require(p.pid)
                #expect(ForkServerTests.command(of: pid) == "plugin-worker", "\(p.identifier): comm is \(ForkServerTests.command(of: pid))")
                let cmdline = (try? Data(contentsOf: URL(fileURLWithPath: "/proc/\(pid)/cmdline"))) ?? Data()
                #expect(String(decoding: cmdline.prefix { $0 != 0 }, as: UTF8.self).hasSuffix("plugin-worker"))
                let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
                #expect(status.contains("Seccomp:\t2"), "\(p.identifier): no seccomp filter in /proc/\(pid)/status")
            }
        } catch {
            await host.shutdown()
            try? await running.value
            throw error
        }
        await host.shutdown()
        try await running.value
        return seen
    }

    // Under the thread sanitizer the test program itself is instrumented: as a worker, its shadow
    // memory does not fit a worker's memory limit (it ends with memoryLimit). The plain run covers it.
    @Test("with no plugin-worker to run, the program's own executable is its workers' binary, forked by itself as fork server or exec'd: named plugin-worker, answering, with the layers a plugin-worker has",
          .disabled(if: Build.threadSanitized, "an instrumented program's shadow memory does not fit a worker's limits"))
    func programServesItsWorkers() async throws {
        let w = try TestWorld()
        try w.bundle("o.kit")
        try w.bundle("o.net", extra: ["permissions": ["network"]])
        // This test binary has plugin-worker beside it: a host takes that, as today.
        let found = PluginHost.Configuration(pluginFolders: [w.plugins], home: w.home)
        #expect(!found.workersRunProgram && found.binaries == Build.dir)
        let reference = try await Self.workers(w) { $0.workerStart = .exec }
        for byForkServer in [true, false] {
            let seen = try await Self.workers(w) {
                $0.settings.useProgramAsWorkerBinary()
                $0.workerStart = byForkServer ? .forkServer : .exec
                #expect($0.workersRunProgram && $0.binaries.isEmpty)
            }
            #expect(Set(seen.keys) == ["o.kit", "o.net"])
            for (id, (status, looks)) in seen {
                // The thread sanitizer's build has no fork server: its workers are exec'd (and say why).
                let forked = byForkServer && !Build.threadSanitized
                #expect(status.workerStart == (forked ? "fork-server" : "exec"), "\(id): \(status.workerStart ?? "?") \(status.workerStartProblem ?? "")")
                if forked { #expect(status.workerStartProblem == nil, "\(id): \(status.workerStartProblem ?? "")") }
                let plain = try #require(reference[id]?.1)
                #expect(looks == plain, "\(id) (\(byForkServer ? "forked" : "exec'd")): \(looks.layers.sorted()) missing \(looks.missing.sorted()), plugin-worker's \(plain.layers.sorted()) missing \(plain.missing.sorted())")
                #expect(looks.layers.isSuperset(of: ["seccomp", "landlock", "userNamespace", "pidNamespace"]))
            }
        }
    }

    /// A host over `world`'s plugins whose `binaries` folder has no plugin-worker, running.
    static func withoutBinaries(_ world: TestWorld) -> (PluginHost, Task<Void, any Error>) {
        var configuration = PluginHost.Configuration(pluginFolders: [world.plugins], home: world.home)
        configuration.binaries = world.home + "/no-binaries-here"
        configuration.workerStart = .exec
        var logger = Logger(label: "program-binary-test")
        logger.logLevel = .critical
        let host = PluginHost(configuration: configuration, logger: logger)
        return (host, Task { try await host.run() })
    }

    @Test("a binaries folder without plugin-worker: the plugin fails with an error that says what to set")
    func missingBinarySaysWhatToSet() async throws {
        let w = try TestWorld()
        try w.bundle("o.kit")
        let (host, running) = Self.withoutBinaries(w)
        try? await host.waitUntilReady()
        var said = ""
        try await waitUntil("the plugin to fail") {
            let p = try await host.status().first { $0.identifier == "o.kit" }
            said = p?.lastError ?? p?.error ?? ""
            return p?.state == "failed" && !said.isEmpty
        }
        #expect(said.contains("no-binaries-here/plugin-worker") && said.contains("SUPERVISOR_BINARIES"), "\(said)")
        await host.shutdown()
        try await running.value
    }

    @Test("1,000 plugins whose workers cannot be spawned at all: each fails with the reason, and the supervisor is ready and answers (passes over the plugins nested one in another, one level a failure, would overflow the event loop's stack)")
    func thousandSpawnFailures() async throws {
        let w = try TestWorld()
        let library = Build.library("TestKit")
        for i in 0..<1_000 {
            let bundle = w.plugins + "/o.many\(i)"
            try FileManager.default.createDirectory(atPath: bundle, withIntermediateDirectories: true)
            if link(library, bundle + "/libTestKit.so") != 0 { try FileManager.default.copyItem(atPath: library, toPath: bundle + "/libTestKit.so") }
            try #"{"identifier":"o.many\#(i)","version":"1.0.0","library":"libTestKit.so"}"#.write(toFile: bundle + "/plugin.json", atomically: false, encoding: .utf8)
        }
        let (host, running) = Self.withoutBinaries(w)
        try await host.waitUntilReady()
        let all = try await host.status()
        #expect(all.count == 1_000)
        #expect(all.allSatisfy { $0.state == "failed" && ($0.lastError ?? "").contains("no-binaries-here/plugin-worker") })
        await #expect(throws: (any Error).self) { try await host.call("o.many999", "echo", 1, as: Int.self) }
        await host.shutdown()
        try await running.value
    }
}
