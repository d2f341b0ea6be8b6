import Foundation
import IPC
import PluginProtocol
import Protocol
import Testing

/// SPEC §8: plugins crash, hang, flood and leak on purpose; the rest keeps running.
@Suite(.serialized, .timeLimit(.minutes(5)))
struct FaultTests {
    static func hostile() throws -> String { try SandboxTests.hostileLibrary() }

    @Test("each crash is recorded with its cause, restarted once, and the neighbour never notices")
    func crashCauses() throws {
        let w = try TestWorld()
        let lib = try Self.hostile()
        for name in ["segv", "abort", "exit3", "exit0"] { try w.bundle("x.\(name)", library: lib) }
        try w.bundle("x.fatal")
        try w.bundle("x.always", library: lib, extra: ["restart": "always"])
        try w.bundle("x.healthy")
        let sv = try RunningSupervisor(w)
        let cases: [(String, String, (PluginProtocol.ExitStatus) -> Bool)] = [
            ("x.segv", "segv", { $0.signal == "SIGSEGV" }),
            ("x.abort", "abort", { $0.signal == "SIGABRT" }),
            ("x.exit3", "exit3", { $0.code == 3 }),
        ]
        for (id, method, check) in cases {
            let t0 = Date()
            let r = try sv.cli("call", id, method, "{}")
            // The plugin had started the call that ended it: not run again, and the caller hears so.
            #expect(r.err.contains("unavailable: \(id)'s worker ended") && r.err.contains("after its plugin started \(method)")
                    && r.err.contains("(started:"), "\(r.err)")
            #expect(Date().timeIntervalSince(t0) < 2, "a call to a dying plugin waited")
            try sv.waitUntil("\(id) running again") { let p = try sv.plugin(id); return p.state == "running" && p.restarts == 1 }
            let exit = try #require(try sv.plugin(id).lastExit)
            #expect(check(exit), "\(id): \(exit)")
            #expect(try sv.call("x.healthy", "echo", "1", as: Int.self) == 1)
        }
        // A Swift fatalError.
        _ = try sv.cli("call", "x.fatal", "crash", #"{"how":"fatal"}"#)
        try sv.waitUntil("x.fatal running again") { try sv.plugin("x.fatal").restarts == 1 && sv.plugin("x.fatal").state == "running" }
        let fatal = try #require(try sv.plugin("x.fatal").lastExit)
        #expect(fatal.signal == "SIGILL" || fatal.signal == "SIGTRAP", "\(fatal)")
        #expect(fatal.message?.contains("a trap in the plugin's code") == true, "\(fatal)")
        #expect(sv.log.contains("fatalError on purpose"), "the runtime's message is in the log")
        // exit(0) out of the blue: clean, so on-failure leaves it stopped; `always` restarts it.
        _ = try sv.cli("call", "x.exit0", "exit0", "{}")
        try sv.waitUntil("x.exit0 stopped") { try sv.plugin("x.exit0").state == "stopped" }
        #expect(try sv.plugin("x.exit0").lastExit?.code == 0)
        #expect(try sv.plugin("x.exit0").restarts == 0)
        _ = try sv.cli("call", "x.always", "exit0", "{}")
        try sv.waitUntil("x.always back") { let p = try sv.plugin("x.always"); return p.restarts == 1 && p.state == "running" }
        #expect(sv.log.contains("x.segv exited: signal SIGSEGV"))
        #expect(try sv.plugin("x.healthy").restarts == 0)
    }

    @Test("a crash's restart takes the worker spawned on its notice, which loads the plugin only when told; one not needed is discarded unloaded")
    func standbyRestarts() throws {
        let w = try TestWorld()
        let lib = try Self.hostile()
        // Each load of the library adds a line to <data>/loads (hostile.c's `announce`).
        for id in ["s.crash", "s.clean", "s.liar"] {
            let bundle = try w.bundle(id, library: lib, extra: id == "s.liar" ? ["limits": ["startupTimeoutMs": 400]] : [:])
            try "announce".write(toFile: bundle + "/ctor-action", atomically: true, encoding: .utf8)
        }
        let sv = try RunningSupervisor(w, args: ["--log-level", "debug"])
        func loads(_ id: String) -> Int {
            ((try? String(contentsOfFile: w.home + "/data/\(id)/loads", encoding: .utf8)) ?? "").split(separator: "\n").count
        }
        func workers() -> Int { workerChildren(of: sv.pid).count }
        func leftovers(_ id: String) -> [String] {
            ((try? FileManager.default.contentsOfDirectory(atPath: w.home + "/tmp")) ?? []).filter { $0.hasPrefix(id + "@") }
        }
        #expect(loads("s.crash") == 1 && loads("s.clean") == 1 && loads("s.liar") == 1)
        #expect(workers() == 3)

        // A crash: its next worker, spawned on the first sign of the end, waited sandboxed for the
        // word to load; it loads the library once, and serves. (The first sign is the worker's
        // notice or its end of stream; one read after the reap, on a busy loop, makes no standby:
        // the restart then spawns as before. So the notice comes first here, by hand.)
        let crashed = try sv.plugin("s.crash").pid
        _ = try sv.cli("call", "s.crash", "forgeNotice", "{}")
        try sv.waitUntil("a standby for s.crash") { workers() == 4 }
        _ = try sv.cli("call", "s.crash", "segv", "{}")
        try sv.waitUntil("s.crash running again") { let p = try sv.plugin("s.crash"); return p.state == "running" && p.restarts == 1 }
        let restarted = try sv.plugin("s.crash")
        #expect(restarted.timings?["standbyUs"] != nil, "the restart did not take a standby: \(restarted.timings ?? [:])")
        #expect(restarted.pid != crashed)
        #expect(sv.log.contains("standby worker takes the restart"))
        #expect(try sv.call("s.crash", "ctorResult", as: String.self) == "announced")
        #expect(loads("s.crash") == 2)
        #expect(try sv.plugin("s.crash").lastExit?.signal == "SIGSEGV")

        // A clean exit under on-failure: no restart, so its standby is killed before it loads
        // anything, and leaves no process, folder or group behind. (A clean exit sends no notice,
        // and its end of stream may be read after its reap, when no standby is made any more: the
        // notice comes first here, by hand.)
        _ = try sv.cli("call", "s.clean", "forgeNotice", "{}")
        try sv.waitUntil("a standby for s.clean") { workers() == 4 }
        _ = try sv.cli("call", "s.clean", "exit0", "{}")
        try sv.waitUntil("s.clean stopped") { try sv.plugin("s.clean").state == "stopped" }
        try sv.waitUntil("the standby of s.clean gone") { workers() == 2 && leftovers("s.clean").isEmpty }
        #expect(sv.log.contains("standby worker discarded: s.clean is not restarted at once"))
        #expect(loads("s.clean") == 1)

        // A worker that says it is ending and does not: its standby is discarded once the start-up
        // timeout passes, unloaded, and the worker serves on.
        let liar = try sv.plugin("s.liar").pid
        _ = try sv.cli("call", "s.liar", "forgeNotice", "{}")
        try sv.waitUntil("the standby of s.liar discarded") { sv.log.contains("standby worker discarded: not needed within 400 ms") }
        try sv.waitUntil("the standby of s.liar gone") { workers() == 2 && leftovers("s.liar").isEmpty }
        #expect(loads("s.liar") == 1)
        let p = try sv.plugin("s.liar")
        #expect(p.pid == liar && p.state == "running" && p.restarts == 0)
        #expect(try sv.call("s.liar", "ctorResult", as: String.self) == "announced")
        // No group of a discarded standby is left: one per live worker (where workers get groups).
        if let pid = p.pid, let group = CgroupTests().folder(pid, "memory") {
            let base = (group as NSString).deletingLastPathComponent
            try sv.waitUntil("a group per live worker") {
                ((try? FileManager.default.contentsOfDirectory(atPath: base)) ?? []).filter { $0.hasPrefix("s.") }.count == 2
            }
        }
    }

    @Test("standbyWorkers always: a standby waits beside each running plugin without loading it; a crash's restart takes it and another follows; a planned restart and the shutdown end it")
    func keptStandbys() throws {
        let w = try TestWorld()
        let lib = try Self.hostile()
        // Each load of the library adds a line to <data>/loads (hostile.c's `announce`).
        for id in ["k.crash", "k.planned"] {
            let bundle = try w.bundle(id, library: lib)
            try "announce".write(toFile: bundle + "/ctor-action", atomically: true, encoding: .utf8)
        }
        let sv = try RunningSupervisor(w, args: ["--config", try w.config(#"{"standbyWorkers": "always"}"#), "--log-level", "debug"])
        func loads(_ id: String) -> Int {
            ((try? String(contentsOfFile: w.home + "/data/\(id)/loads", encoding: .utf8)) ?? "").split(separator: "\n").count
        }
        func alive(_ pid: Int32) -> Bool { kill(pid, 0) == 0 && !isZombie(pid) }
        // Followed throughout: a standby never loaded its plugin, so no `started` was heard of it
        // and no `exited` is (checked once the shutdown has ended every worker).
        let eventsFile = w.root + "/events.txt"
        let follower = try ClientTests.follow(sv, [], to: eventsFile)
        defer { follower.terminate() }
        try sv.waitUntil("a standby beside each plugin") { try sv.status().allSatisfy { $0.standbyPid != nil } }
        // A standby just forked may not yet be named plugin-worker: waited for, not sampled.
        try sv.waitUntil("four workers") { workerChildren(of: sv.pid).count == 4 }
        #expect(loads("k.crash") == 1 && loads("k.planned") == 1, "a standby ran plugin code")
        #expect(try sv.cli("status").out.contains("standby workers waiting to take a restart: 2"))
        #expect(try sv.cli("metrics").out.contains("supervisor_standby_workers 2"))
        let first = try sv.plugin("k.crash")
        let standby = try #require(first.standbyPid)
        #expect(standby != first.pid)

        // A crash: the kept standby is the restart's worker; it loads the library once, then a
        // new standby is kept beside it.
        _ = try sv.cli("call", "k.crash", "segv", "{}")
        try sv.waitUntil("k.crash running again") { let p = try sv.plugin("k.crash"); return p.state == "running" && p.restarts == 1 }
        let restarted = try sv.plugin("k.crash")
        #expect(restarted.pid == standby, "the restart did not take the kept standby: \(restarted)")
        #expect(restarted.timings?["loadOrderUs"] != nil && restarted.timings?["dlopenUs"] != nil, "\(restarted.timings ?? [:])")
        #expect(try sv.call("k.crash", "ctorResult", as: String.self) == "announced")
        #expect(loads("k.crash") == 2)
        let next = try sv.waitFor("another standby for k.crash") { try sv.plugin("k.crash").standbyPid.flatMap { $0 != standby ? $0 : nil } }
        #expect(alive(next))

        // SIGTERM to a standby waiting at its gate: no plugin is there to hear willTerminate, so it
        // ends at once, unloaded (not after the 5 s grace, nor on its next `load`), and the plugin
        // serves on. A kept standby that ended by itself is not made again until the next start.
        kill(next, SIGTERM)
        try sv.waitUntil(timeout: 3, "the signalled standby gone") { !alive(next) }
        try sv.waitUntil("its end logged") { sv.log.contains("standby worker ended before it was needed") }
        #expect(loads("k.crash") == 2, "the signalled standby ran plugin code")
        #expect(try sv.plugin("k.crash").pid == standby)
        #expect(try sv.call("k.crash", "ctorResult", as: String.self) == "announced")

        // A planned restart: the standby of the stopped worker goes, unloaded; the new worker gets its own.
        let planned = try sv.plugin("k.planned")
        let plannedStandby = try #require(planned.standbyPid)
        _ = try sv.cli("restart", "k.planned")
        try sv.waitUntil("k.planned restarted with a new standby") {
            let p = try sv.plugin("k.planned")
            return p.state == "running" && p.pid != planned.pid && p.standbyPid != nil && p.standbyPid != plannedStandby
        }
        try sv.waitUntil("the old standby of k.planned gone") { !alive(plannedStandby) }
        #expect(sv.log.contains("standby worker discarded: k.planned stopped"))
        #expect(loads("k.planned") == 2)

        // The shutdown ends every worker, standbys too (k.crash has none since its standby was signalled).
        #expect(try sv.plugin("k.crash").standbyPid == nil)
        let everyone = try sv.status().flatMap { [$0.pid, $0.standbyPid].compactMap { $0 } }
        #expect(everyone.count == 3)
        sv.signal(SIGTERM)
        #expect(try sv.waitForExit() == 0)
        try sv.waitUntil("no worker left") { everyone.allSatisfy { !alive($0) } }
        follower.waitUntilExit()
        let heard = try String(contentsOfFile: eventsFile, encoding: .utf8)
        #expect(heard.contains("exited  k.planned  pid \(planned.pid ?? 0) "), "\(heard)")
        for pid in [next, plannedStandby] { #expect(!heard.contains("pid \(pid) "), "a standby that never loaded was announced: \(heard)") }
    }

    @Test("a plugin that ends its worker cleanly before it runs, or closes the worker's socket, has not stopped: it is restarted, its cause said")
    func cleanEndsThatAreNoStop() throws {
        let w = try TestWorld()
        let ctor = try w.bundle("e.ctor", library: try Self.hostile())
        try "exit0".write(toFile: ctor + "/ctor-action", atomically: true, encoding: .utf8)
        try w.bundle("e.closer", library: try Self.hostile())
        try w.bundle("e.healthy")
        let cfg = try w.config(#"{"restartLimit": 2, "restartWindowSeconds": 60, "restartBackoffBaseMs": 50}"#)
        let sv = try RunningSupervisor(w, args: ["--config", cfg])
        try sv.waitUntil("e.ctor to fail") { try sv.plugin("e.ctor").state == "failed" }
        let early = try sv.plugin("e.ctor")
        #expect(early.restarts == 2)
        #expect(early.error?.contains("before its plugin was running") == true, "\(early.error ?? "")")
        #expect(early.lastExit?.reason == .startupFailed && early.lastExit?.code == 0, "\(String(describing: early.lastExit))")
        let pid = try sv.plugin("e.closer").pid
        _ = try sv.cli("call", "e.closer", "closeAll", "{}")
        try sv.waitUntil("e.closer to run again") { let p = try sv.plugin("e.closer"); return p.state == "running" && p.pid != pid }
        let closer = try sv.plugin("e.closer")
        #expect(closer.lastExit?.reason == .disconnected && closer.lastExit?.code == 74, "\(String(describing: closer.lastExit))")
        #expect(sv.log.contains("before the supervisor asked this worker to end"), "\(sv.log)")
        #expect(try sv.call("e.healthy", "echo", "1", as: Int.self) == 1)
    }

    @Test("a plugin that sends from a thread of its own as it is stopped ends stopped, not disconnected: what it sent after willTerminate makes the supervisor's close a reset")
    func aChattyPluginStopsCleanly() throws {
        let w = try TestWorld()
        try w.bundle("e.chatty", library: try Self.hostile())
        let sv = try RunningSupervisor(w)
        for round in 0..<25 {
            #expect(try sv.cli("call", "e.chatty", "chatty", "{}").code == 0)
            #expect(try sv.cli("restart", "e.chatty").code == 0)
            let exit = try sv.plugin("e.chatty").lastExit
            #expect(exit?.reason == .stopped && exit?.code == 0, "round \(round): \(String(describing: exit))")
        }
        #expect(!sv.log.contains("before the supervisor asked this worker to end"))
    }

    @Test("bytes sent to a worker with no descriptor left under its limit fail with a reason that names the limit; the worker serves on")
    func bytesToAWorkerOutOfDescriptors() throws {
        let w = try TestWorld()
        try w.bundle("d.full", library: try Self.hostile(), extra: ["limits": ["openFiles": 64]])
        let sv = try RunningSupervisor(w)
        let pid = try sv.plugin("d.full").pid
        let taken = try sv.cli("call", "d.full", "exhaustFds", "{}")
        #expect(taken.code == 0, "\(taken.err)")
        let input = w.root + "/big.bin"
        #expect(FileManager.default.createFile(atPath: input, contents: Data(repeating: 7, count: 200_000)))
        let r = try sv.cli("call", "--input", input, "d.full", "echo", "{}")
        #expect(r.code != 0 && r.err.contains("no descriptor left under its open-files limit (64, limits.openFiles)"), "\(r.out) \(r.err)")
        #expect(try sv.plugin("d.full").pid == pid)
    }

    @Test("crashing in the constructor or in startup counts towards the intensity limit; restart brings it back")
    func intensityAndBackoff() throws {
        let w = try TestWorld()
        let ctor = try w.bundle("i.ctor", library: try Self.hostile())
        try "segv".write(toFile: ctor + "/ctor-action", atomically: true, encoding: .utf8)
        let startup = try w.bundle("i.startup")
        #expect(FileManager.default.createFile(atPath: startup + "/crash-in-startup", contents: nil))
        let refuses = try w.bundle("i.refuses")
        #expect(FileManager.default.createFile(atPath: refuses + "/fail-startup", contents: nil))
        try w.bundle("i.dependent", deps: [Dep("i.startup")])
        try w.bundle("i.healthy")
        let cfg = try w.config(#"{"restartLimit": 3, "restartWindowSeconds": 60, "restartBackoffBaseMs": 50}"#)
        let sv = try RunningSupervisor(w, args: ["--config", cfg])
        // The ready line waits for each plugin's first start to settle (a crash settles it), not
        // for its restarts: with jittered backoffs one may still be restarting when it comes.
        try sv.waitUntil("the three crashing plugins failed") {
            try ["i.ctor", "i.startup", "i.refuses"].allSatisfy { try sv.plugin($0).state == "failed" }
        }
        for id in ["i.ctor", "i.startup", "i.refuses"] {
            let p = try sv.plugin(id)
            #expect(p.state == "failed", "\(id) is \(p.state)")
            #expect(p.restarts == 3)
            #expect(p.error?.contains("restarted 3 times in 60 s; stays failed until `supervisor restart \(id)`") == true, "\(p.error ?? "")")
        }
        #expect(try sv.plugin("i.ctor").lastExit?.signal == "SIGSEGV")
        #expect(try sv.plugin("i.startup").lastExit?.signal == "SIGSEGV")
        #expect(try sv.plugin("i.refuses").lastExit?.message?.contains("startup refused on purpose") == true)
        #expect(try sv.plugin("i.dependent").state == "failed")
        #expect(try sv.plugin("i.dependent").error?.contains("dependency i.startup is failed") == true)
        // Backoff: the first restart is immediate, later ones wait longer and longer.
        let delays = sv.log.split(separator: "\n").filter { $0.contains("restarting i.ctor in") }.compactMap { line -> Int? in
            guard let r = line.range(of: "restarting i.ctor in ") else { return nil }
            return Int(line[r.upperBound...].prefix { $0.isNumber })
        }
        #expect(delays.count == 3)
        #expect(delays.first == 0)
        #expect(delays.count == 3 && delays[1] >= 40 && delays[2] > delays[1], "\(delays)")
        #expect(try sv.call("i.healthy", "echo", "1", as: Int.self) == 1)
        // Fixed: `supervisor restart` clears the failure.
        try FileManager.default.removeItem(atPath: startup + "/crash-in-startup")
        let r = try sv.cli("restart", "i.startup")
        #expect(r.code == 0, "\(r.err)")
        #expect(try sv.plugin("i.startup").state == "running")
        try sv.waitUntil("the dependent to start") { try sv.plugin("i.dependent").state == "running" }
    }

    @Test("hangs: a call past its timeout is cancelled in the plugin; a caller that goes away cancels too")
    func cancellation() throws {
        let w = try TestWorld()
        try w.bundle("c.slow")
        let sv = try RunningSupervisor(w)
        let r = try sv.cli("call", "--timeout", "200", "c.slow", "sleep", #"{"ms":4000}"#)
        #expect(r.err.contains("timeout"))
        try sv.waitUntil("the plugin's task to be cancelled") { try sv.info("c.slow").names.contains("cancelled:4000") }
        let client = try rawControl(sv.socket)
        try client.sendFrame(callFrame(id: 1, target: "c.slow", method: "sleep", params: #"{"ms":4001}"#))
        // Only a call that reached the plugin can be cancelled there.
        try sv.waitUntil("the call to reach the plugin") { try sv.info("c.slow").names.contains("sleeping:4001") }
        client.close()
        try sv.waitUntil("the abandoned call to be cancelled") { try sv.info("c.slow").names.contains("cancelled:4001") }
    }

    @Test("the watchdog kills a worker whose loop is blocked; a constructor that never returns hits the start-up timeout")
    func watchdogAndStartupTimeout() throws {
        let w = try TestWorld()
        let lib = try Self.hostile()
        try w.bundle("w.blocker", library: lib)
        let spinner = try w.bundle("w.spinner", library: lib, extra: ["restart": "never"])
        try "hang".write(toFile: spinner + "/ctor-action", atomically: true, encoding: .utf8)
        try w.bundle("w.healthy")
        let cfg = try w.config(#"{"pingIntervalMs": 200, "pingTimeoutMs": 600, "startupTimeoutMs": 1500}"#)
        let sv = try RunningSupervisor(w, args: ["--config", cfg])
        let spun = try #require(try sv.plugin("w.spinner").lastExit)
        #expect(spun.reason == .startupTimeout)
        #expect(spun.signal == "SIGKILL")
        let before = try #require(try sv.plugin("w.blocker").pid)
        let r = try sv.cli("call", "--timeout", "10000", "w.blocker", "blockLoop", "{}")
        #expect(r.err.contains("unavailable"), "\(r.err)")
        try sv.waitUntil("w.blocker restarted") { let p = try sv.plugin("w.blocker"); return p.restarts == 1 && p.state == "running" }
        #expect(try sv.plugin("w.blocker").lastExit?.reason == .watchdog)
        #expect(try sv.plugin("w.blocker").pid != before)
        #expect(try sv.call("w.healthy", "echo", "1", as: Int.self) == 1)
    }

    @Test("a worker with nothing inside is checked only every idleCheckIntervalMs; a call to it has it watched: stopped while idle, it is killed by the watchdog once called, and serves again")
    func idleWorkersAreWatchedFromTheirFirstCall() throws {
        let w = try TestWorld()
        try w.bundle("i.quiet")
        let cfg = try w.config(#"{"pingIntervalMs": 100, "pingTimeoutMs": 400, "idleCheckIntervalMs": 3600000}"#)
        let sv = try RunningSupervisor(w, args: ["--config", cfg])
        let stopped = try #require(try sv.plugin("i.quiet").pid)
        kill(stopped, SIGSTOP)
        // The call makes it busy: pinged from the next tick, no pong, killed; the call, which the
        // stopped worker never read, goes to the next worker (SPEC §15) and is answered there.
        let r = try sv.cli("call", "--timeout", "10000", "i.quiet", "echo", "1")
        #expect(r.code == 0 && r.out.contains("1"), "\(r.out) \(r.err)")
        try sv.waitUntil("i.quiet restarted") { let p = try sv.plugin("i.quiet"); return p.restarts == 1 && p.state == "running" }
        #expect(try sv.plugin("i.quiet").lastExit?.reason == .watchdog)
        #expect(try sv.call("i.quiet", "echo", "2", as: Int.self) == 2)
    }

    @Test("memory: over the soft limit a plugin gets memoryWarning; unbounded allocation ends it with memoryLimit")
    func memoryLimits() throws {
        let w = try TestWorld()
        try w.bundle("m.hog", library: try Self.hostile(), extra: ["limits": ["memoryMB": 96], "restart": "never"])
        try w.bundle("m.healthy")
        let sv = try RunningSupervisor(w)
        let supervisorRSS = try rss(sv.pid)
        _ = try sv.cli("call", "m.hog", "alloc", "{}")
        try sv.waitUntil(timeout: 15, "m.hog to die") { try sv.plugin("m.hog").lastExit != nil }
        let exit = try #require(try sv.plugin("m.hog").lastExit)
        #expect(exit.reason == .memoryLimit, "\(exit)")
        #expect(try sv.call("m.healthy", "echo", "1", as: Int.self) == 1)
        #expect(try rss(sv.pid) < supervisorRSS + 32 << 20)
    }

    /// Waits up to 30 s for `condition`, for a supervisor these tests start themselves (not a
    /// `RunningSupervisor`, whose `waitUntil` also prints its log).
    static func waitUntil(_ what: String, _ condition: () throws -> Bool) throws {
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline { if try condition() { return }; usleep(20_000) }
        throw HarnessError("timed out waiting for \(what)")
    }

    /// A v1 memory group around the supervisor (a systemd `MemoryMax=`, a container's limit).
    static let enclosingGroupRoot = "/sys/fs/cgroup/memory"

    @Test("memory: a worker the OOM killer ends because the group the supervisor runs in is full is not blamed on its own limit (it never reached it); one at its own limit still is",
          .enabled(if: FileManager.default.fileExists(atPath: FaultTests.enclosingGroupRoot + "/memory.limit_in_bytes")))
    func anEnclosingGroupsOOMIsNotTheWorkersLimit() throws {
        let w = try TestWorld()
        try w.bundle("m.big", library: try Self.hostile(), extra: ["limits": ["memoryMB": 1024], "restart": "never"])
        try w.bundle("m.small", library: try Self.hostile(), extra: ["limits": ["memoryMB": 96], "restart": "never"])
        let group = Self.enclosingGroupRoot + "/sp-test-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: group, withIntermediateDirectories: false)
        try String(256 << 20).write(toFile: group + "/memory.limit_in_bytes", atomically: false, encoding: .utf8)
        let supervisor = Process()
        supervisor.executableURL = URL(fileURLWithPath: "/bin/sh")
        // Into the group, then the supervisor in its place (its workers' groups are made under it).
        supervisor.arguments = ["-c", "echo $$ > \(group)/cgroup.procs && exec \"$0\" \"$@\"", Build.supervisor, "start", "--home", w.home, "--plugins", w.plugins]
        supervisor.standardOutput = FileHandle.nullDevice
        supervisor.standardError = FileHandle.nullDevice
        try supervisor.run()
        defer {
            // Stopped cleanly, its workers' groups go; what a kill leaves is removed leaves first.
            if supervisor.isRunning { kill(supervisor.processIdentifier, SIGTERM) }
            let deadline = Date().addingTimeInterval(20)
            while supervisor.isRunning, Date() < deadline { usleep(50_000) }
            if supervisor.isRunning { kill(supervisor.processIdentifier, SIGKILL) }
            supervisor.waitUntilExit()
            let inside = (FileManager.default.enumerator(atPath: group)?.compactMap { $0 as? String } ?? []).map { group + "/" + $0 }
                .filter { var isDir: ObjCBool = false; return FileManager.default.fileExists(atPath: $0, isDirectory: &isDir) && isDir.boolValue }
            for folder in inside.sorted(by: { $0.count > $1.count }) { _ = rmdir(folder) }
            _ = rmdir(group)
        }
        let socket = w.home + "/supervisor.sock"
        func status(_ id: String) throws -> PluginStatus? {
            let r = try Shell.run(Build.supervisor, ["status", "--json", "--socket", socket], timeout: 10)
            guard r.code == 0 else { return nil }
            return try JSONDecoder().decode([PluginStatus].self, from: Data(r.out.utf8)).first { $0.identifier == id }
        }
        try Self.waitUntil("both plugins running") { try status("m.big")?.state == "running" && status("m.small")?.state == "running" }
        // The OOM killer chooses by size: the worker that allocates without end, not the
        // supervisor (~30 MiB), whose memory stays flat.
        // Its own limit (1 GiB) is far; the group around the supervisor (256 MiB) runs out first.
        _ = try Shell.run(Build.supervisor, ["call", "--socket", socket, "m.big", "alloc", "{}"], timeout: 30)
        try Self.waitUntil("m.big to end") { try status("m.big")?.lastExit != nil }
        let big = try #require(try status("m.big")?.lastExit)
        #expect(big.reason != .memoryLimit && big.message?.contains("memory ran out around its group") == true
                && big.message?.contains("not at its own limit of 1024 MiB") == true, "\(big)")
        _ = try Shell.run(Build.supervisor, ["call", "--socket", socket, "m.small", "alloc", "{}"], timeout: 30)
        try Self.waitUntil("m.small to end") { try status("m.small")?.lastExit != nil }
        let small = try #require(try status("m.small")?.lastExit)
        #expect(small.reason == .memoryLimit, "\(small) \(small.message ?? "")")
    }

    @Test("memory: pages of a file read through mmap are not memory the plugin holds; reading a file larger than its limit does not end it")
    func mappedFilesAreNotHeldMemory() throws {
        let w = try TestWorld()
        try w.bundle("m.reader", library: try Self.hostile(), extra: ["limits": ["memoryMB": 64], "restart": "never"])
        let sv = try RunningSupervisor(w)
        let pid = try sv.plugin("m.reader").pid
        let r = try sv.cli("call", "--timeout", "30000", "m.reader", "mapFile", "{}")
        #expect(r.code == 0 && r.out.contains(#""rc":"#), "\(r.out) \(r.err)")
        let after = try sv.plugin("m.reader")
        #expect(after.pid == pid && after.lastExit == nil, "\(String(describing: after.lastExit))")
    }

    @Test("soft memory limit sends memoryWarning")
    func softMemoryWarning() throws {
        let w = try TestWorld()
        try w.bundle("m.soft", extra: ["limits": ["memoryMB": 512, "softMemoryMB": 8]])
        let sv = try RunningSupervisor(w)
        #expect(try sv.call("m.soft", "hold", #"{"mb":16}"#, as: Int.self) == 16)
        try sv.waitUntil("memoryWarning at m.soft") { try sv.info("m.soft").names.contains("memoryWarning") }
        #expect(sv.log.contains("over its soft limit of 8 MiB"))
    }

    @Test("floods and bad frames from a worker drop that worker (protocolViolation), never the supervisor")
    func floodsAndGarbage() throws {
        let w = try TestWorld()
        let lib = try Self.hostile()
        for name in ["garbage", "giant", "socketFlood", "stdoutFlood", "forkbomb"] {
            try w.bundle("f.\(name)", library: lib, extra: ["restart": "never"])
        }
        try w.bundle("f.healthy")
        // A flood threshold a loaded machine's supervisor still reads past in a second (the default,
        // 20,000, needs a core to itself): what is tested is that the rate ends the flooder.
        let cfg = try w.config(#"{"floodLogsPerSecond": 2000}"#)
        let sv = try RunningSupervisor(w, args: ["--config", cfg])
        let rssBefore = try rss(sv.pid)
        for name in ["garbage", "giant", "socketFlood", "stdoutFlood", "forkbomb"] {
            _ = try sv.cli("call", "--timeout", "3000", "f.\(name)", name, "{}")
        }
        // A socket flood is told by its rate: more than 2,000 log messages read in one second. An
        // instrumented supervisor (the TSan run) may read fewer than that while the stdout flood
        // runs too: there the flooder is either dropped or held back by its socket and rate-limited.
        let socketFloodDropped = !Build.threadSanitized
        for name in ["garbage", "giant"] + (socketFloodDropped ? ["socketFlood"] : []) {
            try sv.waitUntil("f.\(name) dropped") { try sv.plugin("f.\(name)").lastExit != nil }
            let exit = try #require(try sv.plugin("f.\(name)").lastExit)
            #expect(exit.reason == .protocolViolation, "f.\(name): \(exit)")
        }
        if socketFloodDropped {
            #expect(try sv.plugin("f.socketFlood").lastExit?.message?.contains("flooding") == true)
        } else {
            try sv.waitUntil("f.socketFlood's log messages rate-limited, or f.socketFlood dropped") {
                try sv.plugin("f.socketFlood").lastExit?.message?.contains("flooding") == true
                    || sv.log.split(separator: "\n").contains { $0.contains("plugin=f.socketFlood") && $0.contains("log messages over 200 or 1 MiB a second") }
            }
        }
        #expect(try sv.plugin("f.giant").lastExit?.message?.contains("over the limit") == true)
        try sv.waitUntil("f.forkbomb stopped") { try sv.plugin("f.forkbomb").lastExit != nil }
        #expect(try sv.plugin("f.forkbomb").lastExit?.syscall == "clone")
        // The stdout flood goes on; the supervisor keeps serving, and its memory stays bounded.
        for _ in 0..<20 { #expect(try sv.call("f.healthy", "echo", "1", as: Int.self) == 1) }
        try sv.waitUntil("dropped stdout lines to be reported") { sv.log.contains("stdout: dropped") }
        #expect(try rss(sv.pid) < rssBefore + 48 << 20)
        #expect(try sv.plugin("f.stdoutFlood").state == "running")
    }

    @Test("after a worker's protocol violation nothing it sends is acted on: its answer, sent at once or 200 ms later, fails the call with unavailable")
    func nothingAfterAViolation() throws {
        let w = try TestWorld()
        let lib = try Self.hostile()
        try w.bundle("v.garbage", library: lib, extra: ["restart": "never"])
        let sv = try RunningSupervisor(w)
        for method in ["garbage", "garbageThenReply"] {
            if method == "garbageThenReply" {
                _ = try sv.cli("restart", "v.garbage")
                try sv.waitUntil("v.garbage running again") { try sv.plugin("v.garbage").state == "running" }
            }
            let r = try sv.cli("call", "--timeout", "5000", "v.garbage", method, "{}")
            #expect(r.code != 0, "\(method): the answer after the violation reached the caller: \(r.out)")
            #expect(r.err.contains("unavailable"), "\(method): \(r.err)")
            try sv.waitUntil("v.garbage dropped") { try sv.plugin("v.garbage").state != "running" }
            #expect(try sv.plugin("v.garbage").lastExit?.reason == .protocolViolation)
        }
    }

    @Test("misbehaviour on the protocol socket: a pong made up ahead of its ping, requests while reading no answer, a flood of late replies each end their worker with the reason; a length no frame can have is refused; huge log messages are dropped undecoded; the neighbour is served throughout")
    func protocolSocketMisbehaviour() throws {
        let w = try TestWorld()
        let lib = try Self.hostile()
        for name in ["pong", "ask", "late", "len", "logs"] { try w.bundle("p.\(name)", library: lib, extra: ["restart": "never"]) }
        try w.bundle("p.fine")
        // The watchdog would end p.ask first, its I/O thread being held: given time, the check
        // of its unread answers does.
        let sv = try RunningSupervisor(w, args: ["--config", try w.config(#"{"pingTimeoutMs": 60000}"#)])
        func ended(_ id: String, _ reason: String) throws {
            // 65,537 calls (p.ask) take a debug supervisor 10 s and more on a loaded machine.
            try sv.waitUntil(timeout: 60, "\(id) ended") { try sv.plugin(id).lastExit != nil }
            let exit = try #require(try sv.plugin(id).lastExit)
            #expect(exit.reason == .protocolViolation && exit.message?.contains(reason) == true, "\(id): \(exit)")
            #expect(try sv.call("p.fine", "echo", "1", as: Int.self) == 1)
        }
        // Without the check, the watchdog would take that pong for its ping's answer.
        _ = try sv.cli("call", "p.pong", "pongAhead", "{}")
        try ended("p.pong", "which was never pinged")
        // (An instrumented supervisor reads too slowly for these two: the rules are the core's
        // UnreadAnswersTests and RateWindow's.)
        if !Build.threadSanitized {
            // Its I/O thread held, a thread asks on: the answers would pile up in the supervisor.
            _ = try sv.cli("call", "--timeout", "1000", "p.ask", "askWithoutReading", "{}")
            try ended("p.ask", "it does not read its socket")
            #expect(try rss(sv.pid) < 400 << 20, "the supervisor held the answers")
            // More than 20,000 replies a second to a call already answered.
            _ = try sv.cli("call", "p.late", "lateReplyFlood", "{}")
            try ended("p.late", "replies in one second to requests already answered or given up on")
        }
        let len = try sv.cli("call", "p.len", "sendHugeLength", "{}")
        #expect(len.out.trimmingCharacters(in: .whitespacesAndNewlines) == "\(-EMSGSIZE)", "\(len.out)\(len.err)")
        #expect(try sv.plugin("p.len").state == "running")
        // Three messages of 8 MiB (4 M escapes each): over a second's 1 MiB, dropped undecoded.
        #expect(try sv.cli("call", "p.logs", "bigLogs", "{}").code == 0)
        try sv.waitUntil("the next second's message, and the drop reported") {
            sv.log.contains("after the big logs") && sv.log.contains("dropped 3 log messages over 200 or 1 MiB a second")
        }
        // The first is said as it is dropped: a plugin may send nothing after it.
        #expect(sv.log.contains("bytes: one may have at most 1048576 (1 MiB)"), "\(sv.log)")
        #expect(!sv.log.split(separator: "\n").contains { $0.utf8.count > 70_000 })
        #expect(try sv.plugin("p.logs").state == "running")
    }

    @Test("a burst of log messages and stderr lines over their rate, then nothing: how many were dropped is said when the second ends, and counted in plugin_log_dropped_total")
    func droppedLogsAreToldWhenTheSecondEnds() throws {
        let w = try TestWorld()
        try w.bundle("l.burst", library: try Self.hostile())
        let sv = try RunningSupervisor(w)
        #expect(try sv.cli("call", "l.burst", "logBurst", #"{"number": 1000}"#).code == 0)
        // 200 a second are shown, the rest dropped, and nothing comes after them: each second's
        // drop is told when it ends, and the metric counts what was told (on a slow machine a burst
        // can straddle two seconds, or its lines be read in two goes: each is told on its own).
        func told(_ marker: String) -> Int {
            sv.log.split(separator: "\n").compactMap { line -> Int? in
                guard let r = line.range(of: marker) else { return nil }
                return Int(line[r.upperBound...].prefix { $0.isNumber })
            }.reduce(0, +)
        }
        func counted(_ source: String) throws -> Int? {
            let prefix = #"plugin_log_dropped_total{plugin="l.burst",source="\#(source)"} "#
            return try sv.cli("metrics").out.split(separator: "\n").first { $0.hasPrefix(prefix) }.flatMap { Int($0.dropFirst(prefix.count)) }
        }
        let shown = { sv.log.split(separator: "\n").filter { $0.hasSuffix("] burst") }.count }
        try sv.waitUntil("every log message shown or told dropped, and counted") {
            let dropped = told("] dropped ")
            let metric = try counted("log")
            return dropped > 0 && shown() + dropped >= 1000 && metric == dropped
        }
        try sv.waitUntil("the stderr lines' drop told and counted") {
            let dropped = told("stderr: dropped ")
            let metric = try counted("stderr")
            return dropped > 0 && metric == dropped
        }
        #expect(sv.log.contains("log messages over 200 or 1 MiB a second"))
    }

    @Test("a log reader that stops reading (a hung journald, a `| less` left open) holds nothing: with the pipe full, status and calls are answered and SIGTERM stops the supervisor")
    func aStalledLogReaderHoldsNothing() throws {
        let w = try TestWorld()
        try w.bundle("l.chat", library: try Self.hostile())
        try w.bundle("l.fine")
        let err = Pipe()
        let supervisor = Process()
        supervisor.executableURL = URL(fileURLWithPath: Build.supervisor)
        // At debug, the chatter's messages are written.
        supervisor.arguments = ["start", "--home", w.home, "--plugins", w.plugins, "--log-level", "debug"]
        supervisor.standardOutput = FileHandle.nullDevice
        supervisor.standardError = err
        try supervisor.run()
        defer { if supervisor.isRunning { kill(supervisor.processIdentifier, SIGKILL) } }
        let socket = w.home + "/supervisor.sock"
        func cli(_ args: String...) throws -> Shell.Result {
            try Shell.run(Build.supervisor, [args[0], "--socket", socket] + args.dropFirst(), timeout: 10)
        }
        try Self.waitUntil("the supervisor to answer") { try cli("status").code == 0 }
        // 200 log lines a second from the plugin's chatter, and nobody reads them.
        _ = try cli("call", "l.chat", "chatty", #"{"path":"","number":0}"#)
        let readEnd = err.fileHandleForReading.fileDescriptor
        var capacity = fcntl(readEnd, 1032 /* F_GETPIPE_SZ */)
        if capacity <= 0 { capacity = 65_536 }
        try Self.waitUntil("the log pipe to fill") {
            var waiting: Int32 = 0
            return ioctl(readEnd, UInt(FIONREAD), &waiting) == 0 && Int(waiting) >= Int(capacity) - 4_096
        }
        for n in 0..<5 {
            let began = Date()
            #expect(try cli("status").code == 0)
            let echo = try cli("call", "l.fine", "echo", "[\(n)]")
            #expect(echo.code == 0 && echo.out.contains("\(n)"), "\(echo.err)")
            #expect(Date().timeIntervalSince(began) < 5)
        }
        kill(supervisor.processIdentifier, SIGTERM)
        try Self.waitUntil("the supervisor to exit") { !supervisor.isRunning }
        #expect(supervisor.terminationStatus == 0)
        let said = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(said.contains("chat"))
    }

    @Test("a worker that crashes in its willTerminate while `restart` stops it: lastExit says the signal and when, not stopped; the plugin runs again")
    func crashWhileStopping() throws {
        let w = try TestWorld()
        try w.bundle("c.out", library: try Self.hostile())
        let sv = try RunningSupervisor(w)
        let pid = try sv.plugin("c.out").pid
        _ = try sv.cli("call", "c.out", "crashWillTerminate", "{}")
        #expect(try sv.cli("restart", "c.out").code == 0)
        try sv.waitUntil("a new worker") { let p = try sv.plugin("c.out"); return p.state == "running" && p.pid != pid }
        let exit = try #require(try sv.plugin("c.out").lastExit)
        #expect(exit.reason == .signaled && exit.signal == "SIGSEGV" && exit.message == "while it was being stopped", "\(exit)")
    }

    @Test("a plugin may declare at most 1,024 methods idempotent: the next is refused with -E2BIG, and the worker starts with the rest")
    func idempotentDeclarationsHaveALimit() throws {
        let w = try TestWorld()
        let bundle = try w.bundle("d.many", library: try Self.hostile())
        try "declareMany".write(toFile: bundle + "/ctor-action", atomically: true, encoding: .utf8)
        let sv = try RunningSupervisor(w)
        #expect(try sv.call("d.many", "ctorResult", as: [Int32].self) == [0, -E2BIG])
        #expect(try sv.plugin("d.many").state == "running")
    }

    @Test("a plugin whose willTerminate never returns is stopped at the end of the grace period, as a stop, not killed by the watchdog meanwhile")
    func aSlowWillTerminateIsAStop() throws {
        let w = try TestWorld()
        try w.bundle("s.slow", library: try Self.hostile())
        let cfg = try w.config(#"{"pingIntervalMs": 100, "pingTimeoutMs": 300, "shutdownGraceMs": 1500}"#)
        let sv = try RunningSupervisor(w, args: ["--config", cfg])
        #expect(try sv.cli("call", "s.slow", "blockWillTerminate", "{}").code == 0)
        let restart = try sv.cli("restart", "s.slow")
        #expect(restart.code == 0, "\(restart.err)")
        let exit = try #require(try sv.plugin("s.slow").lastExit)
        #expect(exit.reason == .stopped && exit.message?.contains("1500 ms grace period") == true, "\(exit)")
        #expect(!sv.log.contains("no pong within"), "the watchdog killed a worker being stopped")
    }

    @Test("a log line whose metadata holds numbers, booleans, null, arrays and objects is written with them (a number as a number in JSON logs), never in another plugin's name, and its worker runs on")
    func logMetadataOfAnyJSON() throws {
        let w = try TestWorld()
        try w.bundle("l.any", library: try Self.hostile(), extra: ["restart": "never"])
        let sv = try RunningSupervisor(w, args: ["--log-format", "json"])
        let r = try sv.cli("call", "l.any", "logAnyJSON", "{}")
        #expect(r.code == 0, "\(r.err)")
        let line = try sv.waitFor("the plugin's line") { sv.log.split(separator: "\n").first { $0.contains("metadata of every kind") } }
        let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], "\(line)")
        #expect(object["count"] as? Int == 3 && object["ratio"] as? Double == 0.5, "\(line)")
        #expect(object["ok"] as? String == "true" && object["none"] as? String == "null" && object["name"] as? String == "plain", "\(line)")
        #expect(object["where.file"] as? String == "x.c" && object["where.line"] as? Int == 7, "\(line)")
        #expect((object["tags"] as? [Any]).map { "\($0)" } == #"["a", 1]"#, "\(line)")
        #expect(object["plugin"] as? String == "l.any", "\(line)")
        let p = try sv.plugin("l.any")
        #expect(p.state == "running" && p.lastExit == nil, "\(p)")
        // Which worker said it: the supervisor's to say, as `plugin` is.
        #expect(object["pid"] as? String == p.pid.map(String.init), "\(line)")
    }

    @Test("a plugin's log text and output lines cannot start a line of their own (a newline, a carriage return, a terminal escape are written as escapes), and log text is cut at 4096 bytes")
    func logTextCannotForgeALine() throws {
        let w = try TestWorld()
        try w.bundle("l.forge", library: try Self.hostile(), extra: ["restart": "never"])
        let sv = try RunningSupervisor(w)
        let r = try sv.cli("call", "l.forge", "logForged", "{}")
        #expect(r.code == 0, "\(r.err)")
        let cut = try sv.waitFor("the long line") { sv.log.split(separator: "\n").first { $0.contains("(100000 bytes, cut)") } }
        #expect(cut.utf8.count < 4096 + 300, "\(cut.utf8.count) bytes")
        let lines = sv.log.split(separator: "\n")
        #expect(!lines.contains { $0.hasPrefix("2026-01-01T00:00:00+0000") }, "a forged line was written")
        let harmless = try #require(lines.first { $0.contains("harmless") })
        #expect(harmless.contains(#"harmless\n2026-01-01T00:00:00+0000 error supervisor: plugin=other.victim FORGED\u{1b}[2K"#), "\(harmless)")
        #expect(harmless.contains(#"k\ney=v\r"#) && harmless.contains("plugin=l.forge"), "\(harmless)")
        // Metadata cannot pass for more fields: a value with a space, `=` or a quote is quoted
        // (logfmt), a key's space or `=` becomes `_`.
        #expect(harmless.contains(#"a="1 plugin=other.victim \"q\"""#) && harmless.contains("b_c_d=e") && harmless.contains(#"empty="""#), "\(harmless)")
        #expect(!harmless.contains(" plugin=other.victim \"q\" "), "\(harmless)")
        let out = try sv.waitFor("the stdout line") { sv.log.split(separator: "\n").first { $0.contains("out harmless") } }
        #expect(out.contains(#"stdout: out harmless\r2026-01-01T00:00:00+0000 error supervisor: FORGED-OUT\u{1b}[2K"#), "\(out)")
        #expect(!sv.log.contains("\u{1b}") && !sv.log.contains("\r"))
        #expect(try sv.plugin("l.forge").state == "running")
    }

    @Test("a 20,000-byte stderr line written at once with its newline is logged whole, in 4,096-byte pieces; a character is never cut in two")
    func aLongOutputLineIsLoggedWhole() throws {
        let w = try TestWorld()
        try w.bundle("l.long")
        let sv = try RunningSupervisor(w)
        let long = String(repeating: "B", count: 20_000)
        #expect(try sv.cli("call", "l.long", "stderr", #"{"line":"\#(long)"}"#).code == 0)
        let pieces = try sv.waitFor("the line's last piece") { () -> [Substring]? in
            let lines = sv.log.split(separator: "\n").filter { $0.contains("stderr: B") }
            return lines.count == 5 ? lines : nil
        }
        #expect(pieces.map { $0.count(where: { $0 == "B" }) } == [4096, 4096, 4096, 4096, 3616])
        // A three-byte character across the cut goes whole into the next piece.
        let euro = String(repeating: "a", count: 4095) + "€" + "z"
        #expect(try sv.cli("call", "l.long", "stderr", #"{"line":"\#(euro)"}"#).code == 0)
        let next = try sv.waitFor("the euro's piece") { sv.log.split(separator: "\n").first { $0.contains("stderr: €z") } }
        #expect(!sv.log.contains("\u{FFFD}") && !next.isEmpty)
    }

    @Test("a control client's text (a request's type, an install's URI) cannot start a line of the supervisor's log either")
    func clientTextCannotForgeALine() throws {
        let w = try TestWorld()
        try w.bundle("l.quiet")
        let sv = try RunningSupervisor(w)
        let conn = try rawControl(sv.socket)
        defer { conn.close() }
        try conn.sendFrame(framed(#"{"type":"zz\n2026-01-01T00:00:00+0000 critical supervisor: FORGED-TYPE\u001b[2K","id":1}"#))
        _ = try conn.receiveFrame()
        _ = try sv.cli("install", "/nonexistent\n2026-01-01T00:00:00+0000 critical supervisor: FORGED-URI")
        let type = try sv.waitFor("the type's line") { sv.log.split(separator: "\n").first { $0.contains("FORGED-TYPE") } }
        #expect(type.contains(#"zz\n2026-01-01T00:00:00+0000 critical supervisor: FORGED-TYPE\u{1b}[2K"#), "\(type)")
        _ = try sv.waitFor("the URI's line") { sv.log.split(separator: "\n").first { $0.contains("FORGED-URI") } }
        let lines = sv.log.split(separator: "\n")
        #expect(!lines.contains { $0.hasPrefix("2026-01-01T00:00:00+0000") }, "a forged line was written")
        #expect(!sv.log.contains("\u{1b}"))
    }

    @Test("dependents hear dependencyRestarted; with restartDependents they restart too")
    func dependents() throws {
        let w = try TestWorld()
        try w.bundle("d.base")
        try w.bundle("d.user", deps: [Dep("d.base")])
        let sv = try RunningSupervisor(w)
        _ = try sv.cli("call", "d.base", "crash", #"{"how":"segv"}"#)
        try sv.waitUntil("d.user told") { try sv.info("d.user").names.contains("dependencyRestarted:d.base") }
        #expect(try sv.plugin("d.user").restarts == 0)
        #expect(try sv.cli("stop").code == 0)
        _ = try sv.waitForExit()

        let cfg = try w.config(#"{"restartDependents": true}"#)
        let sv2 = try RunningSupervisor(w, args: ["--config", cfg])
        let userPID = try sv2.plugin("d.user").pid
        _ = try sv2.cli("call", "d.base", "crash", #"{"how":"segv"}"#)
        try sv2.waitUntil("d.user restarted") { let p = try sv2.plugin("d.user"); return p.pid != userPID && p.state == "running" }
        #expect(try sv2.plugin("d.user").lastExit?.reason == .dependencyRestarted)
        // Six more restarts of the dependency within the minute: the dependent is restarted each
        // time, and its intensity limit (5 in 60 s) does not count them: it is not its failure.
        for round in 2...7 {
            #expect(try sv2.cli("restart", "d.base").code == 0)
            try sv2.waitUntil("d.user restarted (\(round))") { let p = try sv2.plugin("d.user"); return p.restarts == round && p.state == "running" }
        }
        #expect(try sv2.plugin("d.user").state == "running")
        #expect(try sv2.call("d.user", "echo", "7", as: Int.self) == 7)
    }

    @Test("SIGKILL of the supervisor leaves no worker alive within a second")
    func supervisorKilled() throws {
        let w = try TestWorld()
        try w.bundle("k.one")
        try w.bundle("k.two")
        let blocked = try w.bundle("k.blocked", library: try Self.hostile())
        _ = blocked
        let sv = try RunningSupervisor(w)
        // One worker is stuck in its receive loop, so only PR_SET_PDEATHSIG can end it.
        let r = try Shell.run(Build.supervisor, ["call", "--socket", sv.socket, "--timeout", "100", "k.blocked", "blockLoop", "{}"])
        #expect(r.code != 0)
        var pids = try sv.status().compactMap(\.pid)
        #expect(pids.count == 3)
        // The fork server dies with it too.
        if let server = ForkServerTests.forkServer(of: sv.pid) { pids.append(server) }
        kill(sv.pid, SIGKILL)
        let deadline = Date().addingTimeInterval(1.0)
        var alive = pids
        while Date() < deadline, !alive.isEmpty {
            alive = alive.filter { kill($0, 0) == 0 && !isZombie($0) }
            usleep(10_000)
        }
        #expect(alive.isEmpty, "workers (or the fork server) \(alive) outlived the supervisor")
    }

    @Test("SIGTERM during start-up shuts down cleanly")
    func sigtermDuringStartup() throws {
        let w = try TestWorld()
        try w.bundle("s.base")
        let hang = try w.bundle("s.hang", library: try Self.hostile())
        try "hang".write(toFile: hang + "/ctor-action", atomically: true, encoding: .utf8)
        try w.bundle("s.after", deps: [Dep("s.hang")])
        let sv = try RunningSupervisor(w, waitForReady: false)
        try sv.waitUntil("s.base running") { (try? sv.plugin("s.base").state) == "running" }
        sv.signal(SIGTERM)
        #expect(try sv.waitForExit(timeout: 10) == 0)
        #expect(!sv.stdout.contains("ready"))
    }

    /// With standbys kept too: each crash's restart is delayed by the backoff (only the first in the
    /// window is immediate), so kept standbys are made, discarded and made again all along.
    @Test("soak: a plugin crashes over and over while a client calls a healthy one; nothing fails, nothing leaks", arguments: ["on-crash", "always"])
    func soak(standbyWorkers: String) throws {
        // 40 in the suite (a descriptor kept a crash shows as 40); SOAK_CRASHES=1000 for a long run.
        let crashes = Int(ProcessInfo.processInfo.environment["SOAK_CRASHES"] ?? "") ?? 40
        let w = try TestWorld()
        try w.bundle("soak.crashy", library: try Self.hostile())
        try w.bundle("soak.healthy")
        let cfg = try w.config(#"{"restartLimit": 1000000, "restartBackoffBaseMs": 1, "restartBackoffMaxMs": 5, "standbyWorkers": "\#(standbyWorkers)"}"#)
        let sv = try RunningSupervisor(w, args: ["--config", cfg])
        // Warm up, then take the baseline.
        for _ in 0..<20 { _ = try sv.call("soak.healthy", "echo", "0", as: Int.self) }
        let fdsBefore = try openFDs(sv.pid)
        let rssBefore = try rss(sv.pid)

        let counter = Tally()
        let socket = sv.socket
        let caller = Thread {
            guard let conn = try? BlockingConnection.connect(path: socket) else { return counter.add(failure: "cannot connect") }
            var id: UInt64 = 0
            while !counter.stopped {
                id += 1
                var b = FrameBuilder(kind: .call)
                b.uint("id", id)
                b.string("target", "soak.healthy")
                b.string("method", "echo")
                b.raw("params", Array("[\(id)]".utf8))
                do {
                    try conn.sendFrame(b.finish())
                    let reply = try conn.receiveFrame() ?? []
                    let text = String(decoding: reply, as: UTF8.self)
                    if text.contains("\"result\":[\(id)]") { counter.add(ok: true) } else { counter.add(failure: text) }
                } catch {
                    return counter.add(failure: "\(error)")
                }
            }
        }
        caller.start()
        let started = Date()
        for i in 0..<crashes {
            _ = try sv.cli("call", "soak.crashy", i % 2 == 0 ? "segv" : "abort", "{}")
            try sv.waitUntil(timeout: 10, "soak.crashy back after crash \(i)") {
                let p = try sv.plugin("soak.crashy")
                return p.restarts == i + 1 && p.state == "running"
            }
        }
        let elapsed = Date().timeIntervalSince(started)
        counter.finish()
        try sv.waitUntil("the caller to finish") { caller.isFinished }
        let seen = counter.seen
        // Descriptors of the last crashed workers (their pidfds) go once their exits are settled.
        try? sv.waitUntil(timeout: 5, "supervisor descriptors back to \(fdsBefore)") { try openFDs(sv.pid) <= fdsBefore + 2 }
        let fdsAfter = try openFDs(sv.pid)
        let rssAfter = try rss(sv.pid)
        print("soak: \(crashes) crashes in \(String(format: "%.1f", elapsed)) s, \(seen.ok) healthy calls, \(seen.failures.count) failed; supervisor fds \(fdsBefore) → \(fdsAfter), RSS \(rssBefore >> 20) → \(rssAfter >> 20) MiB")
        #expect(seen.failures.isEmpty, "\(seen.failures.prefix(3))")
        #expect(seen.ok > crashes)
        #expect(kill(sv.pid, 0) == 0)
        #expect(fdsAfter <= fdsBefore + 2, "descriptors grew: \(fdsBefore) → \(fdsAfter)")
        #expect(rssAfter < rssBefore + 24 << 20, "memory grew: \(rssBefore >> 20) → \(rssAfter >> 20) MiB")
        // No worker left over: the two serving, and with kept standbys one beside each; a
        // temporary folder for each of them and no other.
        let expected = standbyWorkers == "always" ? 4 : 2
        if standbyWorkers == "always" { try sv.waitUntil("a standby beside each plugin") { try sv.status().allSatisfy { $0.standbyPid != nil } } }
        try sv.waitUntil("\(expected) workers") { workerChildren(of: sv.pid).count == expected }
        try sv.waitUntil("a temporary folder per worker") {
            ((try? FileManager.default.contentsOfDirectory(atPath: w.home + "/tmp")) ?? []).count == expected
        }
    }
}

func rss(_ pid: Int32) throws -> Int {
    let statm = try String(contentsOfFile: "/proc/\(pid)/statm", encoding: .utf8).split(separator: " ")
    return (Int(statm[1]) ?? 0) * Int(sysconf(Int32(_SC_PAGESIZE)))
}

func openFDs(_ pid: Int32) throws -> Int {
    try FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").count
}

func isZombie(_ pid: Int32) -> Bool {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8) else { return true }
    guard let close = stat.lastIndex(of: ")") else { return false }
    return stat[stat.index(close, offsetBy: 2)] == "Z"
}

/// The live workers the supervisor `pid` has (its children named plugin-worker, zombies aside).
func workerChildren(of pid: Int32) -> [Int32] {
    ((try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []).compactMap { entry -> Int32? in
        guard let child = Int32(entry), let stat = try? String(contentsOfFile: "/proc/\(entry)/stat", encoding: .utf8),
              let open = stat.firstIndex(of: "("), let close = stat.lastIndex(of: ")") else { return nil }
        let fields = stat[stat.index(close, offsetBy: 2)...].split(separator: " ")
        guard stat[stat.index(after: open)..<close] == "plugin-worker", fields.count > 1, fields[0] != "Z", Int32(fields[1]) == pid else { return nil }
        return child
    }
}
