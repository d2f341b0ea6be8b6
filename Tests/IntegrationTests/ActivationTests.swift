import Foundation
import IPC
import PluginProtocol
import Protocol
import SupervisorClient
import Testing

/// SPEC §16 with real workers: `onCall` plugins have no worker until something needs them, and
/// plugins idle for their `idleStopMs` are stopped cleanly and come back on their next call.
@Suite(.serialized, .timeLimit(.minutes(3)))
struct ActivationTests {
    @Test("an onCall plugin has no worker until its first call: ready says it is inactive, the call starts it and is answered, and it runs on")
    func onCallStartsOnTheFirstCall() throws {
        let w = try TestWorld()
        try w.bundle("a.lazy", extra: ["activation": "onCall"])
        try w.bundle("a.eager")
        let sv = try RunningSupervisor(w)
        #expect(sv.stdout.contains("1 plugin running, 1 inactive until called"), "\(sv.stdout)")
        let idle = try sv.plugin("a.lazy")
        #expect(idle.state == "inactive" && idle.pid == nil, "\(idle)")
        #expect(workerChildren(of: sv.pid).count == 1, "a worker for the inactive plugin")
        #expect(try sv.call("a.lazy", "echo", "[7]", as: [Int].self) == [7])
        let running = try sv.plugin("a.lazy")
        #expect(running.state == "running" && running.pid != nil && running.restarts == 0, "\(running)")
        #expect(sv.log.contains("activating a.lazy: call"))
    }

    @Test("an eager plugin that depends on an onCall one activates it at start; both run")
    func aDependentActivatesItsDependency() throws {
        let w = try TestWorld()
        try w.bundle("a.base", extra: ["activation": "onCall"])
        try w.bundle("a.user", deps: [Dep("a.base")])
        let sv = try RunningSupervisor(w)
        try sv.waitUntil("both running") { try sv.status().allSatisfy { $0.state == "running" } }
        #expect(sv.log.contains("activating a.base: dependent a.user"))
    }

    @Test("a call to an onCall plugin whose onCall dependency starts first: both are announced activated, the dependency first, each with its worker's pid; a restart of the dependent while its dependency is idle-stopped counts one restart")
    func activationsAnnouncedInOrderWithTheirPids() throws {
        let w = try TestWorld()
        try w.bundle("a.dep", extra: ["activation": "onCall", "idleStopMs": 300])
        try w.bundle("a.top", deps: [Dep("a.dep")], extra: ["activation": "onCall"])
        let sv = try RunningSupervisor(w)
        let file = w.root + "/events.json"
        let follower = try ClientTests.follow(sv, ["--json"], to: file)
        defer { follower.terminate() }
        // The text form too: what woke it, and how long it idled.
        let text = w.root + "/events.txt"
        let textFollower = try ClientTests.follow(sv, [], to: text)
        defer { textFollower.terminate() }
        try sv.waitUntil("the followers to listen") { try sv.cli("metrics").out.contains("supervisor_host_event_listeners 2") }
        #expect(try sv.call("a.top", "echo", "[1]", as: [Int].self) == [1])
        let activated = try sv.waitFor("both activations heard") { () -> [HostEvent]? in
            let lines = ((try? String(contentsOfFile: file, encoding: .utf8)) ?? "").split(separator: "\n")
            let events = lines.compactMap { try? JSONDecoder().decode(HostEvent.self, from: Data($0.utf8)) }.filter { $0.event == .activated }
            return events.count == 2 ? events : nil
        }
        #expect(activated.map(\.plugin) == ["a.dep", "a.top"], "\(activated)")
        #expect(activated[0].pid == (try sv.plugin("a.dep").pid) && activated[0].pid != nil, "\(activated)")
        #expect(activated[1].pid == (try sv.plugin("a.top").pid) && activated[1].pid != nil, "\(activated)")
        #expect(activated.map(\.trigger) == ["dependent a.top", "call"], "\(activated)")
        // The dependency stops after its 300 ms; the dependent runs on (it has no idleStopMs).
        try sv.waitUntil("a.dep idle-stopped") { try sv.plugin("a.dep").state == "inactive" }
        try sv.waitUntil("the text lines") {
            let lines = ((try? String(contentsOfFile: text, encoding: .utf8)) ?? "").split(separator: "\n")
            return lines.contains { $0.contains("activated") && $0.contains("a.top") && $0.contains("by call") }
                && lines.contains { $0.contains("deactivated") && $0.contains("a.dep") && $0.contains("idle ") && $0.contains(" ms") }
        }
        let restart = try sv.cli("restart", "a.top")
        #expect(restart.code == 0, "\(restart.err)")
        #expect(try sv.plugin("a.top").restarts == 1)
    }

    @Test("a standby kept beside an idle plugin (standbyWorkers always) does not keep it from its idle stop, and goes with it")
    func idleStopWithAKeptStandby() throws {
        let w = try TestWorld()
        try w.bundle("a.kept", extra: ["idleStopMs": 300])
        let cfg = try w.config(#"{"idleCheckIntervalMs": 100, "standbyWorkers": "always"}"#)
        let sv = try RunningSupervisor(w, args: ["--config", cfg])
        // Read where it is seen: the plugin may be idle enough to stop by the next `status`.
        var seen: pid_t?
        try sv.waitUntil("a.kept's standby") {
            seen = try sv.plugin("a.kept").standbyPid
            return seen != nil
        }
        let standby = try #require(seen)
        try sv.waitUntil(timeout: 10, "a.kept inactive") { try sv.plugin("a.kept").state == "inactive" }
        try sv.waitUntil("its standby gone") { kill(standby, 0) != 0 }
        #expect(try sv.plugin("a.kept").lastExit == nil)
        #expect(try sv.call("a.kept", "echo", "[3]", as: [Int].self) == [3])
    }

    @Test("a plugin idle for its idleStopMs is stopped cleanly (willTerminate), shown inactive, not counted as a restart; its next call starts it again")
    func idleStopAndBack() throws {
        let w = try TestWorld()
        try w.bundle("a.nap", extra: ["idleStopMs": 300])
        let cfg = try w.config(#"{"idleCheckIntervalMs": 100}"#)
        let sv = try RunningSupervisor(w, args: ["--config", cfg])
        let first = try #require(try sv.plugin("a.nap").pid)
        #expect(try sv.call("a.nap", "echo", "[1]", as: [Int].self) == [1])
        try sv.waitUntil(timeout: 10, "a.nap inactive") { try sv.plugin("a.nap").state == "inactive" }
        #expect(kill(first, 0) != 0, "its worker is gone")
        #expect(try sv.plugin("a.nap").lastExit == nil, "an idle stop is not an exit")
        #expect(sv.log.contains("stopped after") && sv.log.contains("without traffic"))
        let terminated = try String(contentsOfFile: w.home + "/data/a.nap/terminated", encoding: .utf8)
        #expect(!terminated.isEmpty, "willTerminate was not delivered")
        #expect(try sv.call("a.nap", "echo", "[2]", as: [Int].self) == [2])
        let back = try sv.plugin("a.nap")
        #expect(back.state == "running" && back.pid != first && back.restarts == 0, "\(back)")
    }

    @Test("an onCall plugin is stopped each time after its idleStopMs, not at the next idle check (the default 30 s), also when it was called again after a stop")
    func idleStopIsOnTime() throws {
        let w = try TestWorld()
        try w.bundle("a.brief", extra: ["activation": "onCall", "idleStopMs": 300])
        let sv = try RunningSupervisor(w)
        // Its stop comes ~300 ms after each call (and a 250 ms tick); 8 s is far below the 30 s an
        // idle check would take, and room enough for a slow machine. The second round starts when
        // no running plugin had an idle stop due, which once put the next look 30 s away.
        for round in 1...2 {
            #expect(try sv.call("a.brief", "echo", "[\(round)]", as: [Int].self) == [round])
            try sv.waitUntil(timeout: 8, "a.brief inactive after call \(round)") { try sv.plugin("a.brief").state == "inactive" }
        }
    }

    @Test("a slow call keeps a plugin from its idle stop: only a plugin with nothing inside is idle")
    func aLongCallIsNotIdleness() throws {
        let w = try TestWorld()
        // Idle for a second, not less: reading its pid after the first call must not race its stop.
        try w.bundle("a.busy", extra: ["idleStopMs": 1_000])
        let cfg = try w.config(#"{"idleCheckIntervalMs": 50}"#)
        let sv = try RunningSupervisor(w, args: ["--config", cfg])
        // From this test's own connection, one call right after another: the plugin is never idle
        // before the slow call, however slow this machine (or the thread sanitizer) is.
        let connection = try rawControl(sv.socket)
        defer { connection.close() }
        try connection.sendFrame(callFrame(id: 1, target: "a.busy", method: "echo", params: "[1]"))
        #expect(try CrashReplayTests.read(connection).result == "[1]")
        let pid = try #require(try sv.plugin("a.busy").pid)
        let stopsBefore = sv.log.components(separatedBy: "a.busy: no traffic for").count
        try connection.sendFrame(callFrame(id: 2, target: "a.busy", method: "sleep", params: #"{"ms":2500}"#))
        #expect(try CrashReplayTests.read(connection).result == "2500")
        #expect(sv.log.components(separatedBy: "a.busy: no traffic for").count == stopsBefore, "an idle stop began while a call was inside")
        #expect(try sv.plugin("a.busy").pid == pid)
    }

    @Test("an onCall plugin that cannot start: its caller hears why, and the supervisor serves the others")
    func anActivationThatFails() throws {
        let w = try TestWorld()
        let bundle = try w.bundle("a.broken", extra: ["activation": "onCall", "restart": "never"])
        try "".write(toFile: bundle + "/crash-in-startup", atomically: true, encoding: .utf8)
        try w.bundle("a.fine")
        let sv = try RunningSupervisor(w)
        let r = try sv.cli("call", "a.broken", "echo", "[1]")
        #expect(r.code != 0 && r.err.contains("unavailable"), "\(r.err)")
        #expect(try sv.plugin("a.broken").state == "failed")
        #expect(try sv.call("a.fine", "echo", "[3]", as: [Int].self) == [3])
    }
}

extension ActivationTests {
    @Test("open, a stream call and an event each activate an onCall plugin")
    func everyTriggerActivates() throws {
        let w = try TestWorld()
        for id in ["t.open", "t.stream", "t.event"] { try w.bundle(id, extra: ["activation": "onCall"]) }
        let sv = try RunningSupervisor(w)
        #expect(try sv.status().allSatisfy { $0.state == "inactive" })
        let opened = try sv.cli("open", "plugin://t.open/echo?x=1")
        #expect(opened.code == 0 && opened.out.contains("\"x\""), "\(opened.out)\(opened.err)")
        let rows = try sv.cli("call", "--stream", "t.stream", "rows", #"{"count":3}"#)
        #expect(rows.code == 0 && rows.out.split(separator: "\n").count >= 3, "\(rows.out)\(rows.err)")
        let sent = try sv.cli("send", "background", "--plugin", "t.event")
        #expect(sent.code == 0 && sent.out.contains("t.event"), "\(sent.out)\(sent.err)")
        #expect(try sv.info("t.event").names.contains("background"))
        #expect(try sv.status().allSatisfy { $0.state == "running" })
        for (id, trigger) in [("t.open", "open"), ("t.stream", "call"), ("t.event", "event background")] {
            #expect(sv.log.contains("activating \(id): \(trigger)"), "\(id)")
        }
    }

    @Test("a call that comes while an idle stop is under way waits, and the plugin comes back for it")
    func aCallDuringTheIdleStop() throws {
        let w = try TestWorld()
        let bundle = try w.bundle("a.race", extra: ["idleStopMs": 200])
        try "1500".write(toFile: bundle + "/terminate-delay-ms", atomically: true, encoding: .utf8)
        let cfg = try w.config(#"{"idleCheckIntervalMs": 50}"#)
        let sv = try RunningSupervisor(w, args: ["--config", cfg])
        let first = try #require(try sv.plugin("a.race").pid)
        try sv.waitUntil(timeout: 10, "the idle stop to begin") { sv.log.contains("a.race: no traffic for") }
        #expect(kill(first, 0) == 0, "its willTerminate takes 1.5 s: the worker is still there")
        #expect(try sv.call("a.race", "echo", "[5]", as: [Int].self) == [5])
        let p = try sv.plugin("a.race")
        #expect(p.state == "running" && p.pid != first && p.restarts == 0, "\(p)")
        #expect(sv.log.contains("activating a.race: call"), "the trigger names what waited: \(sv.log)")
    }

    @Test("a stream that is slow but alive keeps its plugin from the idle stop")
    func aSlowStreamIsNotIdleness() throws {
        let w = try TestWorld()
        // Longer than the CLI's start on a slow machine, shorter than the stream.
        try w.bundle("a.flow", extra: ["idleStopMs": 2500])
        let cfg = try w.config(#"{"idleCheckIntervalMs": 50}"#)
        let sv = try RunningSupervisor(w, args: ["--config", cfg])
        let pid = try #require(try sv.plugin("a.flow").pid)
        // Eight rows 500 ms apart: 4 s of a stream, each gap under idleStopMs.
        let rows = try sv.cli("call", "--stream", "a.flow", "rows", #"{"count":8,"delayMs":500}"#)
        #expect(rows.code == 0 && rows.out.split(separator: "\n").count >= 8, "\(rows.out)\(rows.err)")
        #expect(!sv.log.contains("a.flow: no traffic for"), "an idle stop began while its stream flowed")
        #expect(try sv.plugin("a.flow").pid == pid)
    }

    @Test("a reload leaves an inactive plugin inactive with what changed on disk; an upgrade in place keeps it inactive too")
    func reloadAndUpgradeKeepItInactive() throws {
        let w = try TestWorld()
        try w.bundle("a.sleepy", extra: ["activation": "onCall"])
        let sv = try RunningSupervisor(w)
        try w.bundle("a.sleepy", version: "1.1.0", extra: ["activation": "onCall"])
        #expect(try sv.cli("reload").code == 0)
        let p = try sv.plugin("a.sleepy")
        #expect(p.state == "inactive" && p.version == "1.1.0", "\(p)")
        let upgraded = try sv.cli("upgrade")
        #expect(upgraded.code == 0, "\(upgraded.err)")
        try sv.waitUntil("the upgraded supervisor to answer") { (try? sv.plugin("a.sleepy").state) == "inactive" }
        #expect(try sv.call("a.sleepy", "echo", "[9]", as: [Int].self) == [9])
        // Activated, it is handed over running, its worker kept.
        let pid = try #require(try sv.plugin("a.sleepy").pid)
        #expect(try sv.cli("upgrade").code == 0)
        try sv.waitUntil("the second upgrade's supervisor to answer") { (try? sv.plugin("a.sleepy").pid) == pid }
        #expect(try sv.plugin("a.sleepy").state == "running")
        #expect(try sv.call("a.sleepy", "echo", "[10]", as: [Int].self) == [10])
    }

    @Test("an onCall plugin whose manifest a reload finds broken fails; fixed, the next reload leaves it inactive (no worker) until a call starts it")
    func aFixedOnCallPluginWaitsToBeNeeded() throws {
        let w = try TestWorld()
        let bundle = try w.bundle("a.fixed", extra: ["activation": "onCall"])
        let sv = try RunningSupervisor(w)
        let file = w.root + "/events.json"
        let follower = try ClientTests.follow(sv, ["--json"], to: file)
        defer { follower.terminate() }
        try sv.waitUntil("the follower to listen") { try sv.cli("metrics").out.contains("supervisor_host_event_listeners 1") }
        let good = try String(contentsOfFile: bundle + "/plugin.json", encoding: .utf8)
        try #"{"identifier": "a.fixed", "activation": "onCall"}"#.write(toFile: bundle + "/plugin.json", atomically: true, encoding: .utf8)
        #expect(try sv.cli("reload").code == 0)
        #expect(try sv.plugin("a.fixed").state == "failed")
        try good.write(toFile: bundle + "/plugin.json", atomically: true, encoding: .utf8)
        #expect(try sv.cli("reload").code == 0)
        let p = try sv.plugin("a.fixed")
        #expect(p.state == "inactive" && p.pid == nil && p.error == nil, "\(p)")
        #expect(workerChildren(of: sv.pid).isEmpty)
        // A listener that heard it fail hears it is inactive again (no idle time: it did not idle).
        let told = try sv.waitFor("failed, then deactivated") { () -> [HostEvent]? in
            let lines = ((try? String(contentsOfFile: file, encoding: .utf8)) ?? "").split(separator: "\n")
            let events = lines.compactMap { try? JSONDecoder().decode(HostEvent.self, from: Data($0.utf8)) }.filter { $0.plugin == "a.fixed" }
            return events.last?.event == .deactivated ? events : nil
        }
        #expect(told.map(\.event) == [.failed, .deactivated] && told.last?.idleMs == nil, "\(told)")
        #expect(try sv.call("a.fixed", "echo", "[3]", as: [Int].self) == [3])
        #expect(try sv.plugin("a.fixed").state == "running")
    }

    @Test("an onCall plugin fixed by a reload while an eager dependent failed by it: the dependent is retried and its start activates the plugin; both run")
    func aFixedOnCallPluginWithAFailedDependentStarts() throws {
        let w = try TestWorld()
        let bundle = try w.bundle("a.base", extra: ["activation": "onCall"])
        try w.bundle("a.user", deps: [Dep("a.base")])
        let good = try String(contentsOfFile: bundle + "/plugin.json", encoding: .utf8)
        try #"{"identifier": "a.base", "activation": "onCall"}"#.write(toFile: bundle + "/plugin.json", atomically: true, encoding: .utf8)
        let sv = try RunningSupervisor(w)
        #expect(try sv.plugin("a.base").state == "failed")
        #expect(try sv.plugin("a.user").state == "failed")
        try good.write(toFile: bundle + "/plugin.json", atomically: true, encoding: .utf8)
        let reload = try sv.cli("reload")
        #expect(reload.code == 0, "\(reload.err)")
        try sv.waitUntil("both running") { try sv.plugin("a.base").state == "running" && sv.plugin("a.user").state == "running" }
        #expect(try sv.call("a.user", "echo", "[4]", as: [Int].self) == [4])
    }

    @Test("an onCall plugin that failed to start, fixed on disk and reloaded while its dependents failed by it: it starts, its eager dependent runs again, its onCall dependent is inactive until called")
    func aFailedOnCallPluginFixedBringsItsDependentsBack() throws {
        let w = try TestWorld()
        let bundle = try w.bundle("a.lazy", extra: ["activation": "onCall"])
        try "".write(toFile: bundle + "/fail-startup", atomically: true, encoding: .utf8)
        try w.bundle("a.eager", deps: [Dep("a.lazy")])
        try w.bundle("a.ondemand", deps: [Dep("a.lazy")], extra: ["activation": "onCall"])
        let sv = try RunningSupervisor(w, args: ["--config", try w.config(#"{"restartLimit": 1}"#)])
        _ = try sv.cli("call", "a.ondemand", "echo", "[1]")
        try sv.waitUntil("all three failed") {
            try ["a.lazy", "a.eager", "a.ondemand"].allSatisfy { try sv.plugin($0).state == "failed" }
        }
        try FileManager.default.removeItem(atPath: bundle + "/fail-startup")
        try w.bundle("a.lazy", version: "1.0.1", extra: ["activation": "onCall"])
        let reload = try sv.cli("reload")
        #expect(reload.code == 0, "\(reload.err)")
        try sv.waitUntil("a.lazy and a.eager running") { try sv.plugin("a.lazy").state == "running" && sv.plugin("a.eager").state == "running" }
        try sv.waitUntil("a.ondemand inactive") { try sv.plugin("a.ondemand").state == "inactive" }
        #expect(try sv.call("a.ondemand", "echo", "[2]", as: [Int].self) == [2])
    }

    @Test("an onCall plugin whose worker exits cleanly (exit(0), a SIGTERM from outside) is inactive again, not stopped for good: its eager dependent runs on, and the next call starts it")
    func aCleanExitOfAnOnCallPluginLeavesItInactive() throws {
        let w = try TestWorld()
        try w.bundle("a.lazy", extra: ["activation": "onCall"])
        try w.bundle("a.user", deps: [Dep("a.lazy")], extra: ["restart": "always"])
        let sv = try RunningSupervisor(w)
        for (n, end) in ["exit0", "SIGTERM"].enumerated() {
            try sv.waitUntil("a.lazy running") { try sv.plugin("a.lazy").state == "running" || sv.plugin("a.lazy").state == "inactive" }
            #expect(try sv.call("a.lazy", "echo", "[\(n)]", as: [Int].self) == [n])
            let pid = try sv.plugin("a.lazy").pid ?? 0
            if end == "exit0" { _ = try sv.cli("call", "a.lazy", "crash", #"{"how":"exit0"}"#) } else { kill(pid_t(pid), SIGTERM) }
            try sv.waitUntil("a.lazy inactive after \(end)") { try sv.plugin("a.lazy").state == "inactive" }
            #expect(try sv.plugin("a.user").state == "running", "\(end)")
            #expect(try sv.call("a.lazy", "echo", "[\(n + 10)]", as: [Int].self) == [n + 10], "\(end)")
            #expect(try sv.plugin("a.lazy").pid != pid)
        }
        // Its dependent's restart (a crash) finds it as a dependency that starts when needed.
        _ = try sv.cli("call", "a.user", "crash", #"{"how":"segv"}"#)
        try sv.waitUntil("a.user running again") { try sv.plugin("a.user").state == "running" && sv.plugin("a.user").restarts == 1 }
        #expect(try sv.call("a.user", "echo", "[7]", as: [Int].self) == [7])
    }

    @Test("an event sent while its plugin's idle stop is under way (a slow willTerminate) waits, as a call does: the plugin starts again and the event is delivered to it")
    func eventDuringAnIdleStop() throws {
        let w = try TestWorld()
        // Long enough for the checks below to reach the worker the event started, not a later one.
        let slow = try w.bundle("a.idle", extra: ["idleStopMs": 1_500])
        try "1000".write(toFile: slow + "/terminate-delay-ms", atomically: true, encoding: .utf8)
        let sv = try RunningSupervisor(w, args: ["--config", try w.config(#"{"idleCheckIntervalMs": 50}"#)])
        let first = try #require(try sv.plugin("a.idle").pid)
        try sv.waitUntil("the idle stop to begin") { sv.log.contains("a.idle: no traffic for") }
        let sent = try sv.cli("send", "background", "--plugin", "a.idle")
        #expect(sent.code == 0 && sent.out.contains(#""delivered":["a.idle"]"#), "\(sent.out)\(sent.err)")
        let now = try sv.plugin("a.idle")
        #expect(now.state == "running" && now.pid != first, "\(now)")
        #expect(try sv.info("a.idle").names.contains("background"))
        #expect(sv.log.contains("activating a.idle: event background"), "the trigger names what waited")
    }
}

extension ActivationTests {
    @Test("calls every 100 ms over a program's direct link keep a plugin with idleStopMs 300 running (the link tells its calls once a second); once they end it is stopped")
    func callsOverADirectLinkAreTraffic() async throws {
        let w = try TestWorld()
        try w.bundle("a.linked", extra: ["idleStopMs": 300])
        let sv = try RunningSupervisor(w, args: ["--config", try w.config(#"{"idleCheckIntervalMs": 50}"#)])
        let client = try await SupervisorClient.connect(socket: sv.socket)
        defer { client.close() }
        #expect(try await client.call("a.linked", "ping", as: Int.self) == 1)
        try await waitUntil("the direct link") { client.linkedPlugins == ["a.linked"] }
        // Calls every 100 ms for 3 s (30 times its idleStopMs), then none.
        let until = ContinuousClock.now + .seconds(3)
        while ContinuousClock.now < until {
            #expect(try await client.call("a.linked", "ping", as: Int.self) == 1)
            try await Task.sleep(for: .milliseconds(100))
        }
        try sv.waitUntil("the idle stop once the calls ended") { try sv.plugin("a.linked").state == "inactive" }
        // Stopped once, after the calls: at least the links' report allowance after the last one.
        let stops = sv.log.split(separator: "\n").filter { $0.contains("a.linked: no traffic for ") }
        #expect(stops.count == 1, "stopped as idle while it was called over its link: \(stops)")
        let idleMs = stops.first.flatMap { Int($0.split(separator: "no traffic for ").last?.split(separator: " ").first ?? "") } ?? 0
        #expect(idleMs >= 2_000, "stopped after \(idleMs) ms without a report from its link")
        #expect(try sv.plugin("a.linked").restarts == 0)
    }

    @Test("a plugin held by a program's direct link is stopped after its idleStopMs each time it was woken, not at the next idle check (the default 30 s)")
    func linkedPluginsStopEachTime() async throws {
        let w = try TestWorld()
        try w.bundle("a.held", extra: ["activation": "onCall", "idleStopMs": 300])
        let sv = try RunningSupervisor(w)
        let client = try await SupervisorClient.connect(socket: sv.socket)
        defer { client.close() }
        for round in 1...2 {
            #expect(try await client.call("a.held", "ping", as: Int.self) == 1)
            try await waitUntil("the direct link, round \(round)") { client.linkedPlugins == ["a.held"] }
            // Held by the link: stopped once its callers' reports are 2 s overdue, well before 30 s.
            try sv.waitUntil(timeout: 8, "the idle stop, round \(round)") { try sv.plugin("a.held").state == "inactive" }
        }
        #expect(try sv.plugin("a.held").restarts == 0)
    }

    @Test("an eager plugin with six onCall dependencies starts (their activations paced, waited for, not asked again); six inactive plugins a reload turns eager all start")
    func pacedActivationsAllComeUp() throws {
        let w = try TestWorld()
        let lazy = (1...6).map { "a.l\($0)" }
        for id in lazy { try w.bundle(id, extra: ["activation": "onCall"]) }
        try w.bundle("a.top", deps: lazy.map { Dep($0) })
        for i in 1...6 { try w.bundle("a.turn\(i)", extra: ["activation": "onCall"]) }
        let sv = try RunningSupervisor(w)
        for id in lazy + ["a.top"] { #expect(try sv.plugin(id).state == "running", "\(id)") }
        #expect(try sv.call("a.top", "echo", "[1]", as: [Int].self) == [1])
        for i in 1...6 { try w.bundle("a.turn\(i)", extra: ["activation": "eager"]) }
        let reload = try sv.cli("reload")
        #expect(reload.code == 0 && reload.out.contains(#""running":13"#), "\(reload.out)\(reload.err)")
        for i in 1...6 { #expect(try sv.plugin("a.turn\(i)").state == "running", "a.turn\(i)") }
    }
}
