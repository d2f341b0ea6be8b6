import Foundation
import PluginProtocol
import Testing

@Suite(.serialized, .timeLimit(.minutes(3)))
struct LifecycleTests {
    @Test("status --json has every field SPEC §6 lists; the table names each plugin")
    func statusFields() throws {
        let w = try TestWorld()
        try w.bundle("s.base", version: "2.1.0-beta.1")
        try w.bundle("s.top", deps: [Dep("s.base")])
        let sv = try RunningSupervisor(w)
        let r = try sv.cli("status", "--json")
        #expect(r.code == 0)
        let raw = try #require(try JSONSerialization.jsonObject(with: Data(r.out.utf8)) as? [[String: Any]])
        #expect(raw.count == 2)
        for entry in raw {
            for key in ["identifier", "version", "state", "pid", "restarts", "dependencies", "variant", "sandbox"] {
                #expect(entry[key] != nil, "missing \(key)")
            }
        }
        let top = try sv.plugin("s.top")
        #expect(top.dependencies == ["s.base"])
        #expect(top.state == "running")
        #expect((top.pid ?? 0) > 0)
        #expect(kill(top.pid!, 0) == 0)
        #expect(try sv.plugin("s.base").version == "2.1.0-beta.1")
        let table = try sv.cli("status")
        #expect(table.out.contains("s.base"))
        #expect(table.out.contains("running"))
    }

    @Test("send delivers events to all or one plugin; restart replaces the worker and tells dependents")
    func sendAndRestart() throws {
        let w = try TestWorld()
        try w.bundle("l.base")
        try w.bundle("l.dep", deps: [Dep("l.base")])
        let sv = try RunningSupervisor(w)
        let all = try sv.cli("send", "memoryWarning")
        #expect(all.code == 0)
        #expect(all.out.contains(#""delivered":["l.base","l.dep"]"#))
        let one = try sv.cli("send", "background", "--plugin", "l.dep")
        #expect(one.out.contains(#""delivered":["l.dep"]"#))
        #expect(try sv.info("l.dep").names.contains("background"))
        #expect(!(try sv.info("l.base").names.contains("background")))
        let bad = try sv.cli("send", "explode")
        #expect(bad.code != 0)
        #expect(bad.err.contains("badRequest: cannot send 'explode'"))

        let before = try sv.plugin("l.base").pid
        let r = try sv.cli("restart", "l.base")
        #expect(r.code == 0, "\(r.err)")
        let after = try sv.plugin("l.base")
        #expect(after.pid != before)
        #expect(after.restarts == 1)
        #expect(after.state == "running")
        try sv.waitUntil("dependencyRestarted at l.dep") {
            try sv.info("l.dep").names.contains("dependencyRestarted:l.base")
        }
        #expect(try sv.cli("restart", "l.nobody").err.contains("no plugin l.nobody"))
    }

    @Test("send to one plugin that is failed: the answer names it in failed with the reason, and the CLI exits 1")
    func sendToAFailedPlugin() throws {
        let w = try TestWorld()
        let bundle = try w.bundle("l.broken", extra: ["restart": "never"])
        try "".write(toFile: bundle + "/crash-in-startup", atomically: true, encoding: .utf8)
        try w.bundle("l.fine")
        let sv = try RunningSupervisor(w)
        try sv.waitUntil("l.broken failed") { try sv.plugin("l.broken").state == "failed" }
        let one = try sv.cli("send", "memoryWarning", "--plugin", "l.broken")
        #expect(one.code == 1, "\(one.out)\(one.err)")
        #expect(one.out.contains(#""delivered":[]"#) && one.out.contains(#""failed":{"l.broken":"unavailable: "#), "\(one.out)")
        #expect(one.err.contains("l.broken: unavailable: "), "\(one.err)")
        let all = try sv.cli("send", "memoryWarning")
        #expect(all.code == 0 && all.out.contains(#""delivered":["l.fine"]"#), "\(all.out)\(all.err)")
    }

    @Test("signals to the supervisor: USR1, TSTP, CONT reach every plugin; HUP rescans; TERM stops cleanly")
    func supervisorSignals() throws {
        let w = try TestWorld()
        try w.bundle("g.one")
        try w.bundle("g.two", deps: [Dep("g.one")])
        let sv = try RunningSupervisor(w)
        sv.signal(SIGUSR1)
        try sv.waitUntil("memoryWarning everywhere") {
            try sv.info("g.one").names.contains("memoryWarning") && sv.info("g.two").names.contains("memoryWarning")
        }
        sv.signal(SIGTSTP)
        try sv.waitUntil("background everywhere") {
            try sv.info("g.one").names.contains("background") && sv.info("g.two").names.contains("background")
        }
        #expect(sv.process.isRunning)  // SIGTSTP does not stop the supervisor
        sv.signal(SIGCONT)
        try sv.waitUntil("foreground everywhere") {
            try sv.info("g.one").names.contains("foreground") && sv.info("g.two").names.contains("foreground")
        }
        // SIGHUP: a new bundle starts, a removed one stops.
        try w.bundle("g.three", deps: [Dep("g.one")])
        try FileManager.default.removeItem(atPath: w.plugins + "/g.two")
        sv.signal(SIGHUP)
        try sv.waitUntil("g.three running and g.two gone") {
            let st = try sv.status()
            return st.contains { $0.identifier == "g.three" && $0.state == "running" } && !st.contains { $0.identifier == "g.two" }
        }
        #expect(try sv.plugin("g.one").restarts == 0)
        let pids = try sv.status().compactMap(\.pid)
        sv.signal(SIGTERM)
        #expect(try sv.waitForExit() == 0)
        #expect(sv.log.contains("shutting down (SIGTERM)"))
        for pid in pids { #expect(kill(pid, 0) != 0, "worker \(pid) outlived the supervisor") }
        #expect(!FileManager.default.fileExists(atPath: sv.socket))
        #expect(FileManager.default.fileExists(atPath: w.home + "/data/g.one/terminated"))
    }

    @Test("status then stop, with a failed plugin: the supervisor ends cleanly every time, nothing handed to its loop after the loop ended")
    func stopWithAFailedPlugin() throws {
        for run in 0..<6 {
            let w = try TestWorld()
            try w.bundle("s.ok")
            try w.bundle("s.broken", library: Build.library("NoExport"))
            let sv = try RunningSupervisor(w)
            try sv.waitUntil("s.broken failed") { try sv.plugin("s.broken").state == "failed" }
            _ = try sv.status()
            #expect(try sv.cli("stop").code == 0)
            #expect(try sv.waitForExit() == 0, "run \(run)")
            #expect(!sv.log.contains("Cannot schedule tasks"), "run \(run): \(sv.log)")
            #expect(!sv.log.contains("ERROR"), "run \(run): \(sv.log)")
        }
    }

    @Test("a fatal signal (a watchdog's SIGABRT, a SIGSEGV) ends the supervisor at once, and its workers with it", arguments: [SIGABRT, SIGSEGV])
    func aFatalSignalEndsTheSupervisor(_ fatal: Int32) throws {
        let w = try TestWorld()
        try w.bundle("f.one")
        let sv = try RunningSupervisor(w)
        let worker = try #require(try sv.plugin("f.one").pid)
        sv.signal(fatal)
        // The Swift runtime's backtracer held it for good before (it cannot read the non-dumpable supervisor).
        try sv.waitUntil("the supervisor to end") { !sv.process.isRunning }
        #expect(sv.process.terminationReason == .uncaughtSignal && sv.process.terminationStatus == fatal)
        try sv.waitUntil("its worker to end") { [nil, "Z"].contains(processState(worker)) }
    }

    @Test("SIGINT also shuts down cleanly")
    func sigint() throws {
        let w = try TestWorld()
        try w.bundle("i.one")
        let sv = try RunningSupervisor(w)
        sv.signal(SIGINT)
        #expect(try sv.waitForExit() == 0)
        #expect(FileManager.default.fileExists(atPath: w.home + "/data/i.one/terminated"))
    }

    @Test("signals to one worker's pid reach that plugin alone; SIGTERM makes it exit cleanly")
    func workerSignals() throws {
        let w = try TestWorld()
        try w.bundle("x.one")
        try w.bundle("x.two")
        let sv = try RunningSupervisor(w)
        let pid = try #require(try sv.plugin("x.one").pid)
        kill(pid, SIGUSR1)
        try sv.waitUntil("memoryWarning at x.one") { try sv.info("x.one").names.contains("memoryWarning") }
        kill(pid, SIGTSTP)
        try sv.waitUntil("background at x.one") { try sv.info("x.one").names.contains("background") }
        kill(pid, SIGCONT)
        try sv.waitUntil("foreground at x.one") { try sv.info("x.one").names.contains("foreground") }
        kill(pid, SIGHUP)  // ignored by workers
        #expect(try sv.call("x.one", "echo", "1", as: Int.self) == 1)
        let two = try sv.info("x.two").names
        #expect(!two.contains("memoryWarning") && !two.contains("background"))

        kill(pid, SIGTERM)
        try sv.waitUntil("x.one stopped") { try sv.plugin("x.one").state == "stopped" }
        let one = try sv.plugin("x.one")
        #expect(one.lastExit?.code == 0)
        #expect(one.restarts == 0)
        #expect(FileManager.default.fileExists(atPath: w.home + "/data/x.one/terminated"))
        #expect(try sv.plugin("x.two").state == "running")
        #expect(try sv.call("x.two", "echo", "2", as: Int.self) == 2)
        let unavailable = try sv.cli("call", "x.one", "echo", "1")
        #expect(unavailable.err.contains("unavailable: x.one is stopped"))
    }

    @Test("the control socket is 0600, a second supervisor on the same home refuses, stop exits 0")
    func controlSocketAndLock() throws {
        let w = try TestWorld()
        try w.bundle("o.one")
        let sv = try RunningSupervisor(w)
        var st = stat()
        #expect(stat(sv.socket, &st) == 0)
        #expect(st.st_mode & 0o777 == 0o600)
        let second = try Shell.run(Build.supervisor, ["start", "--home", w.home, "--plugins", w.plugins], timeout: 20)
        #expect(second.code == 1, "a refused start ends with exit 1, not a crash: \(second.code)")
        #expect(second.err.contains("another supervisor (pid \(sv.pid)) is already running"))
        #expect(try sv.call("o.one", "echo", "1", as: Int.self) == 1)
        let r = try sv.cli("stop")
        #expect(r.code == 0)
        #expect(try sv.waitForExit() == 0)
        let gone = try Shell.run(Build.supervisor, ["status", "--socket", sv.socket])
        #expect(gone.code == 2)
        #expect(gone.err.contains("cannot reach the supervisor"))
    }

    @Test("start with no plugins folder option serves the home's plugins")
    func defaultHome() throws {
        let w = try TestWorld()
        try w.bundle("h.one", in: w.home + "/plugins")
        let out = w.root + "/out"
        _ = FileManager.default.createFile(atPath: out, contents: nil)
        let p = Process()
        p.executableURL = URL(fileURLWithPath: Build.supervisor)
        p.arguments = ["start"]
        p.environment = ["SUPERVISOR_HOME": w.home, "PATH": "/usr/bin:/bin"].merging(Build.sanitizerEnvironment) { a, _ in a }
        p.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: out))
        p.standardError = FileHandle.nullDevice
        try p.run()
        defer { if p.isRunning { kill(p.processIdentifier, SIGKILL) } }
        let deadline = Date().addingTimeInterval(20)
        while Date() < deadline, !((try? String(contentsOfFile: out, encoding: .utf8)) ?? "").contains("ready") { usleep(20_000) }
        #expect(((try? String(contentsOfFile: out, encoding: .utf8)) ?? "").contains("ready: 1 plugin running"))
        let r = try Shell.run(Build.supervisor, ["call", "h.one", "echo", "\"hi\""], env: ["SUPERVISOR_HOME": w.home].merging(Build.sanitizerEnvironment) { a, _ in a })
        #expect(r.out.trimmingCharacters(in: .whitespacesAndNewlines) == "\"hi\"")
        kill(p.processIdentifier, SIGTERM)
        p.waitUntilExit()
        #expect(p.terminationStatus == 0)
    }
}

@Suite(.serialized, .timeLimit(.minutes(2)))
struct SignalMaskTests {
    @Test("started with an empty signal mask (as from a shell), every thread still leaves the signals to the relay")
    func emptyMaskAtStart() throws {
        let w = try TestWorld()
        try w.bundle("m.one")
        // The test runner's threads block SIGTERM and friends; a shell does not. Start through a
        // launcher that clears the mask, as a shell would leave it.
        let out = w.root + "/out", err = w.root + "/err"
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = ["python3", "-c", """
            import os, signal, sys
            signal.pthread_sigmask(signal.SIG_SETMASK, [])
            for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGHUP, signal.SIGTSTP):
                signal.signal(s, signal.SIG_DFL)
            os.execv(sys.argv[1], sys.argv[1:])
            """, Build.supervisor, "start", "--home", w.home, "--plugins", w.plugins]
        _ = FileManager.default.createFile(atPath: out, contents: nil)
        _ = FileManager.default.createFile(atPath: err, contents: nil)
        p.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: out))
        p.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: err))
        try p.run()
        defer { if p.isRunning { kill(p.processIdentifier, SIGKILL) } }
        let deadline = Date().addingTimeInterval(20)
        while Date() < deadline, !((try? String(contentsOfFile: out, encoding: .utf8)) ?? "").contains("ready") { usleep(20_000) }
        let blocked = try String(contentsOfFile: "/proc/\(p.processIdentifier)/status", encoding: .utf8)
        #expect(blocked.contains("SigBlk"))
        // Many signals in a row: each must reach the relay (its log line proves the supervisor handled
        // it, so a stopped or dead process cannot pass), none may kill or stop the process.
        let log = { (try? String(contentsOfFile: err, encoding: .utf8)) ?? "" }
        var expected: [String: Int] = [:]
        for (sig, line) in [(SIGUSR1, "memoryWarning acknowledged by 1 plugin(s)"), (SIGTSTP, "background acknowledged by 1 plugin(s)"),
                            (SIGCONT, "foreground acknowledged by 1 plugin(s)"), (SIGHUP, "rescanned plugin folders: 0 new, 0 changed, 0 removed"),
                            (SIGUSR1, "memoryWarning acknowledged by 1 plugin(s)")] {
            expected[line, default: 0] += 1
            kill(p.processIdentifier, sig)
            let deadline = Date().addingTimeInterval(10)
            while Date() < deadline, p.isRunning, log().components(separatedBy: line).count - 1 < expected[line]! { usleep(20_000) }
            #expect(log().components(separatedBy: line).count - 1 == expected[line]!, "signal \(sig) was not handled: \(log())")
            #expect(p.isRunning, "signal \(sig) ended the supervisor")
            #expect(processState(p.processIdentifier) != "T", "signal \(sig) stopped the supervisor")
        }
        kill(p.processIdentifier, SIGTERM)
        p.waitUntilExit()
        #expect(p.terminationStatus == 0)
        #expect(((try? String(contentsOfFile: err, encoding: .utf8)) ?? "").contains("shutting down (SIGTERM)"))
    }

    @Test("a worker's temporary folder is emptied when it ends (a restart, the stop), and ended folders an earlier supervisor left are removed at start")
    func temporaryFolders() throws {
        let w = try TestWorld()
        try w.bundle("t.temp")
        let tmp = w.home + "/tmp"
        // What an upgrade's exec or a SIGKILL cut short: an ended folder still holding a file.
        try FileManager.default.createDirectory(atPath: tmp + "/.ended-1-7/deep", withIntermediateDirectories: true)
        try Data("left".utf8).write(to: URL(fileURLWithPath: tmp + "/.ended-1-7/deep/file"))
        let sv = try RunningSupervisor(w)
        try sv.waitUntil("the earlier supervisor's ended folder removed") { !FileManager.default.fileExists(atPath: tmp + "/.ended-1-7") }
        let scratch = tmp + "/t.temp/scratch"
        try Data("x".utf8).write(to: URL(fileURLWithPath: scratch))
        #expect(try sv.cli("restart", "t.temp").code == 0)
        #expect(try sv.plugin("t.temp").state == "running")
        #expect(!FileManager.default.fileExists(atPath: scratch), "the new worker found its predecessor's file")
        #expect(FileManager.default.fileExists(atPath: tmp + "/t.temp"))
        try sv.waitUntil("the ended worker's folder removed") {
            try FileManager.default.contentsOfDirectory(atPath: tmp).filter { $0.hasPrefix(".ended-") }.isEmpty
        }
        #expect(try sv.cli("stop").code == 0)
        #expect(try sv.waitForExit() == 0)
        // Removed before the supervisor ends, not after.
        #expect(try FileManager.default.contentsOfDirectory(atPath: tmp) == [])
    }
}

/// The state letter in /proc/<pid>/stat (R, S, T for stopped, Z for a zombie), or nil when gone.
func processState(_ pid: Int32) -> Character? {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8), let close = stat.lastIndex(of: ")"),
          stat.distance(from: close, to: stat.endIndex) > 2 else { return nil }
    return stat[stat.index(close, offsetBy: 2)]
}

/// `supervisor reload` and `restart` as their counts say (docs/operations.md).
@Suite(.serialized, .timeLimit(.minutes(3)))
struct ReloadCountTests {
    @Test("reload of a changed bundle answers once it runs again, counted as running")
    func reloadWaitsForWhatItRestarts() throws {
        let w = try TestWorld()
        let slow = try w.bundle("r.slow")
        let sv = try RunningSupervisor(w)
        // The new version takes 1.5 s to start.
        try w.bundle("r.slow", version: "1.0.1")
        try "1500".write(toFile: slow + "/startup-delay-ms", atomically: true, encoding: .utf8)
        let began = Date()
        let reload = try sv.cli("reload")
        #expect(Date().timeIntervalSince(began) >= 1.3, "reload answered after \(Date().timeIntervalSince(began)) s")
        #expect(reload.code == 0 && reload.out.contains(#""changed":1"#) && reload.out.contains(#""running":1"#), "\(reload.out) \(reload.err)")
        #expect(try sv.plugin("r.slow").state == "running" && sv.plugin("r.slow").version == "1.0.1")
    }

    @Test("two reloads of one changed plugin, the second while the first's restart starts: each answers once it runs")
    func twoReloadsOfOnePlugin() async throws {
        let w = try TestWorld()
        let slow = try w.bundle("r.twice")
        let sv = try RunningSupervisor(w)
        try "1500".write(toFile: slow + "/startup-delay-ms", atomically: true, encoding: .utf8)
        try w.bundle("r.twice", version: "1.0.1")
        let first = Task.detached { try sv.cli("reload") }
        try sv.waitUntil("the first reload's restart to start") { try sv.plugin("r.twice").version == "1.0.1" }
        try w.bundle("r.twice", version: "1.0.2")
        let second = try sv.cli("reload")
        let one = try await first.value
        for answer in [one, second] {
            #expect(answer.code == 0 && answer.out.contains(#""running":1"#), "\(answer.out) \(answer.err)")
        }
        let p = try sv.plugin("r.twice")
        #expect(p.state == "running" && p.version == "1.0.2", "\(p.state) \(p.version)")
    }

    @Test("restart during a scheduled restart takes its place: restarts counts it once")
    func restartDuringBackoffCountsOnce() throws {
        let w = try TestWorld()
        try w.bundle("r.crash")
        let sv = try RunningSupervisor(w, args: ["--config", try w.config(#"{"restartBackoffBaseMs": 5000, "restartBackoffMaxMs": 8000}"#)])
        _ = try sv.cli("call", "r.crash", "crash", #"{"how":"segv"}"#)
        try sv.waitUntil("the first restart") { let p = try sv.plugin("r.crash"); return p.state == "running" && p.restarts == 1 }
        _ = try sv.cli("call", "r.crash", "crash", #"{"how":"segv"}"#)
        try sv.waitUntil("the second, scheduled") { let p = try sv.plugin("r.crash"); return p.state == "restarting" && p.restarts == 2 }
        #expect(try sv.cli("restart", "r.crash").code == 0)
        let p = try sv.plugin("r.crash")
        #expect(p.state == "running" && p.restarts == 2, "\(p.state), restarts \(p.restarts)")
    }

    @Test("send to every plugin while one is being stopped by a restart: it is in neither list, and the send succeeds")
    func sendToAllSkipsAPluginBeingStopped() async throws {
        let w = try TestWorld()
        let q = try w.bundle("r.q")
        try w.bundle("r.other")
        try "1500".write(toFile: q + "/terminate-delay-ms", atomically: true, encoding: .utf8)
        let sv = try RunningSupervisor(w)
        let restart = Task.detached { try sv.cli("restart", "r.q") }
        try sv.waitUntil("r.q to be told willTerminate") { FileManager.default.fileExists(atPath: w.home + "/data/r.q/terminating") }
        let send = try sv.cli("send", "memoryWarning")
        #expect(send.code == 0 && send.out.contains(#""delivered":["r.other"]"#) && !send.out.contains("r.q"), "\(send.code) \(send.out) \(send.err)")
        #expect(try await restart.value.code == 0)
    }

    @Test("reload of a changed bundle leaves an idle-stopped plugin inactive (it loads the new one when needed), not counted as a restart")
    func reloadLeavesAnIdleStoppedPluginInactive() throws {
        let w = try TestWorld()
        try w.bundle("r.idle", extra: ["idleStopMs": 300])
        let sv = try RunningSupervisor(w)
        try sv.waitUntil("the idle stop") { try sv.plugin("r.idle").state == "inactive" }
        try w.bundle("r.idle", version: "1.1.0", extra: ["idleStopMs": 300])
        let reload = try sv.cli("reload")
        #expect(reload.code == 0 && reload.out.contains(#""changed":1"#), "\(reload.out) \(reload.err)")
        let p = try sv.plugin("r.idle")
        #expect(p.state == "inactive" && p.restarts == 0 && p.version == "1.1.0", "\(p.state), restarts \(p.restarts), \(p.version)")
        #expect(try sv.call("r.idle", "ping", as: Int.self) == 1)
    }
}

extension LifecycleTests {
    // (A thread-sanitized binary needs terabytes of address space and cannot start under any such limit.)
    @Test("an address-space limit too small for the supervisor's threads (ulimit -v) is refused at once, naming it, before anything starts",
          .enabled(if: !Build.threadSanitized))
    func addressSpaceTooSmall() throws {
        let w = try TestWorld()
        try w.bundle("as.one")
        let r = try Shell.run("/bin/sh", ["-c", "ulimit -v 500000 && exec \"$0\" start --home \"$1\" --plugins \"$2\"", Build.supervisor, w.home, w.plugins],
                              timeout: 30)
        #expect(r.code == 1, "\(r.out)\(r.err)")
        #expect(r.err.contains("the address-space limit (RLIMIT_AS: ulimit -v, or LimitAS= in a systemd unit) is 488 MiB; the supervisor needs 1024 MiB at least"), "\(r.err)")
        #expect(!r.out.contains("ready"))
        #expect(!FileManager.default.fileExists(atPath: w.home + "/supervisor.sock"))
    }
}

extension LifecycleTests {
    @Test("started with stdin and stderr closed (2>&-), the supervisor puts /dev/null there: its log goes nowhere rather than into the first descriptor it opens")
    func closedStandardDescriptors() throws {
        let w = try TestWorld()
        try w.bundle("fd.one")
        let launcher = Process()
        launcher.executableURL = URL(fileURLWithPath: "/bin/sh")
        launcher.arguments = ["-c", "exec \"$0\" start --home \"$1\" --plugins \"$2\" <&- 2>&- >/dev/null", Build.supervisor, w.home, w.plugins]
        try launcher.run()
        defer { if launcher.isRunning { kill(launcher.processIdentifier, SIGKILL) } }
        let socket = w.home + "/supervisor.sock"
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline, (try? Shell.run(Build.supervisor, ["status", "--socket", socket], timeout: 10).code) != 0 { usleep(50_000) }
        for fd in [0, 2] {
            let target = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(launcher.processIdentifier)/fd/\(fd)")
            #expect(target == "/dev/null", "fd \(fd) is \(target)")
        }
        let echo = try Shell.run(Build.supervisor, ["call", "--socket", socket, "fd.one", "echo", "[1]"], timeout: 10)
        #expect(echo.code == 0, "\(echo.err)")
        kill(launcher.processIdentifier, SIGTERM)
        launcher.waitUntilExit()
        #expect(launcher.terminationStatus == 0)
    }
}
