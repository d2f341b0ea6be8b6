import Foundation
import PluginProtocol
import Protocol
import Testing

/// The fork server (`workerStart: "fork-server"`, docs/sandbox.md "Starting workers"): workers
/// forked from it are the supervisor's children with every layer an exec'd worker has; it is
/// started again when it dies, and given up for exec (said in status) when it keeps dying.
@Suite(.serialized, .timeLimit(.minutes(3)))
struct ForkServerTests {
    /// /proc/<pid>/stat's fields after the command name (field 3 on).
    static func statFields(_ pid: Int32) -> [String]? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = text.lastIndex(of: ")") else { return nil }
        return text[text.index(after: close)...].split(separator: " ").map(String.init)
    }

    static func parent(of pid: Int32) -> Int32? { statFields(pid).flatMap { Int32($0[1]) } }

    static func command(of pid: Int32) -> String {
        ((try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8)) ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// The supervisor's fork server: its child named plugin-forksrv.
    static func forkServer(of supervisor: Int32) -> Int32? {
        let all = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return all.compactMap(Int32.init).first { parent(of: $0) == supervisor && command(of: $0) == "plugin-forksrv" && statFields($0)?[0] != "Z" }
    }

    @Test("forked workers are the supervisor's children, named plugin-worker, with the same sandbox layers as exec'd ones")
    func sameLayersBothWays() throws {
        let w = try TestWorld()
        try w.bundle("f.kit")
        try w.bundle("f.net", extra: ["permissions": ["network"]])
        var layers: [WorkerStart: [String: (Set<String>, Set<String>)]] = [:]
        for mode in WorkerStart.both {
            let sv = try RunningSupervisor(w, start: mode)
            for p in try sv.status() {
                let pid = try #require(p.pid)
                #expect(Self.parent(of: pid) == sv.pid, "\(p.identifier)'s parent is \(Self.parent(of: pid) ?? -1), not the supervisor")
                #expect(Self.command(of: pid) == "plugin-worker")
                let cmdline = (try? Data(contentsOf: URL(fileURLWithPath: "/proc/\(pid)/cmdline"))) ?? Data()
                #expect(String(decoding: cmdline.prefix { $0 != 0 }, as: UTF8.self).hasSuffix("plugin-worker"))
                layers[mode, default: [:]][p.identifier] = (Set(p.sandbox), Set((p.sandboxMissing ?? []).map { String($0.prefix { $0 != ":" }) }))
                #expect(try sv.call(p.identifier, "echo", "5", as: Int.self) == 5)
            }
            if mode == .forkServer {
                #expect(Self.forkServer(of: sv.pid) != nil, "no fork server among the supervisor's children")
            }
            #expect(try sv.cli("stop").code == 0)
            #expect(try sv.waitForExit() == 0)
        }
        for id in ["f.kit", "f.net"] {
            let forked = try #require(layers[.forkServer]?[id]), execd = try #require(layers[.exec]?[id])
            #expect(forked.0 == execd.0, "\(id): layers forked \(forked.0.sorted()) vs exec'd \(execd.0.sorted())")
            #expect(forked.1 == execd.1, "\(id): missing forked \(forked.1.sorted()) vs exec'd \(execd.1.sorted())")
            #expect(forked.0.contains("seccomp") && forked.0.contains("landlock") && forked.0.contains("pdeathsig"))
        }
    }

    /// The Swift runtime and libdispatch keep each thread's id in a thread-local once they first
    /// need it, and their locks record their owner by it (priority-inheritance futexes). A forked
    /// worker's main thread is a copy of the fork server's, whose library loading had filled those
    /// in: with its server's id, a lock it held and another thread wanted was never handed over
    /// (both threads spinning, the call never answered). Both ways, the worker's main thread holds
    /// the runtime's once-lock while a second thread waits on it.
    @Test("the Swift runtime's locks hand over between a worker's main thread and another, forked or exec'd")
    func runtimeLocksInForkedWorkers() throws {
        struct OnceRace: Decodable { var value: Int; var mainThread: Bool }
        let w = try TestWorld()
        try w.bundle("o.kit")
        for mode in WorkerStart.both {
            let sv = try RunningSupervisor(w, start: mode)
            #expect(try sv.plugin("o.kit").workerStart == mode.rawValue)
            let r = try sv.cli(["call", "o.kit", "onceRace", "--timeout", "5000"])
            #expect(r.code == 0, "\(mode): \(r.err)")
            if r.code == 0 {
                let race = try JSONDecoder().decode(OnceRace.self, from: Data(r.out.utf8))
                #expect(race.value == 42)
                #expect(race.mainThread, "\(mode): sync methods no longer run on the worker's main thread; the test needs another way there")
            }
            #expect(try sv.cli("stop").code == 0)
            #expect(try sv.waitForExit() == 0)
        }
    }

    @Test("a fork server that dies is started again; one that keeps dying is given up for exec, and status says why")
    func restartedThenGivenUp() throws {
        let w = try TestWorld()
        try w.bundle("r.kit")
        let sv = try RunningSupervisor(w, start: .forkServer)
        var server = try sv.waitFor("the fork server") { Self.forkServer(of: sv.pid) }
        func crashAndWait() throws -> PluginStatus {
            let before = try #require(try sv.plugin("r.kit").pid)
            _ = try sv.cli("call", "r.kit", "crash", #"{"how":"segv"}"#)
            return try sv.waitFor("r.kit restarted") {
                let p = try sv.plugin("r.kit")
                return p.state == "running" && p.pid != nil && p.pid != before ? p : nil
            }
        }
        // Killed twice: started again each time, and workers are still forked from it.
        for round in 1...2 {
            kill(server, SIGKILL)
            let old = server
            server = try sv.waitFor("fork server \(round + 1)") { Self.forkServer(of: sv.pid).flatMap { $0 != old ? $0 : nil } }
            let p = try crashAndWait()
            #expect(p.workerStart == "fork-server", "round \(round): \(p.workerStartProblem ?? "")")
        }
        #expect(sv.log.contains("the fork server (pid"))
        // A third end within the minute: workers are exec'd from now on, and status says why.
        kill(server, SIGKILL)
        try sv.waitUntil("the supervisor to give the fork server up") { sv.log.contains("times within 60 s") }
        let p = try crashAndWait()
        #expect(p.workerStart == "exec")
        #expect(p.workerStartProblem?.contains("the fork server ended 3 times") == true, "\(p.workerStartProblem ?? "nil")")
        #expect(Self.forkServer(of: sv.pid) == nil)
        #expect(try sv.call("r.kit", "echo", "7", as: Int.self) == 7)
        #expect(try sv.cli("stop").code == 0)
        #expect(try sv.waitForExit() == 0)
    }

    @Test("--worker-start takes fork-server or exec only; the config's workerStart too")
    func badMode() throws {
        let w = try TestWorld()
        let r = try Shell.run(Build.supervisor, ["start", "--home", w.home, "--worker-start", "zygote"])
        #expect(r.code != 0)
        #expect(r.err.contains("--worker-start must be fork-server or exec, not 'zygote'"), "\(r.err)")
        let config = w.root + "/config.json"
        try #"{"workerStart": "vfork"}"#.write(toFile: config, atomically: true, encoding: .utf8)
        let c = try Shell.run(Build.supervisor, ["start", "--home", w.home, "--config", config])
        #expect(c.code == 2)
        #expect(c.err.contains("workerStart") && c.err.contains("\"exec\" or \"fork-server\""), "\(c.err)")
    }
}
