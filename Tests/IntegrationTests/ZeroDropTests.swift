import Foundation
import IPC
import PluginProtocol
import Protocol
import Testing

/// SPEC §8: no call is lost to a planned change. Calls to a plugin that is starting, restarting or
/// draining wait in its queue; only a crash fails calls, and only those inside the crashed worker.
@Suite(.serialized, .timeLimit(.minutes(3)))
struct ZeroDropTests {
    /// Callers on their own connections, each calling `echo` in a loop until stopped (`echoCaller`).
    final class Callers: @unchecked Sendable {
        let tally = Tally()
        private var threads: [Thread] = []

        init(socket: String, target: String, via: String? = nil, count: Int) {
            for _ in 0..<count {
                let thread = echoCaller(socket, target, via: via, unavailableAllowed: false, tally)
                threads.append(thread)
                thread.start()
            }
        }

        func stop(_ sv: RunningSupervisor) throws {
            tally.finish()
            try sv.waitUntil(timeout: 30, "the callers to finish") { threads.allSatisfy(\.isFinished) }
        }

        /// Waits until `more` calls beyond those answered so far have been answered.
        func waitForMore(_ sv: RunningSupervisor, _ what: String, _ more: Int = 50) throws {
            let before = tally.seen.ok
            try sv.waitUntil(what) { tally.seen.ok > before + more }
        }

        /// Stops them: not one call may have failed.
        func stopExpectingNoFailure(_ sv: RunningSupervisor, sourceLocation: SourceLocation = #_sourceLocation) throws {
            try stop(sv)
            let seen = tally.seen
            #expect(seen.failures.isEmpty, "\(seen.failures.count) failed calls, first: \(seen.failures.first ?? "")", sourceLocation: sourceLocation)
        }
    }

    /// A supervisor running z.app 1.0.0 from its home's plugins folder (where installs go), and the
    /// shop that serves `versions` (version → extra files in the archive) by archive name.
    /// With `dependent`, z.user depends on z.app.
    private func appUpdates(_ versions: KeyValuePairs<String, [String: String]>, dependent: Bool = false, config: [String: Any] = [:]) throws
        -> (w: TestWorld, sv: RunningSupervisor, archives: [String: String]) {
        let w = try TestWorld()
        let shop = try Shop(w)
        try FileManager.default.createDirectory(atPath: w.home + "/plugins", withIntermediateDirectories: true)
        try w.bundle("z.app", version: "1.0.0", in: w.home + "/plugins")
        if dependent { try w.bundle("z.user", deps: [Dep("z.app")]) }
        var archives: [String: String] = [:]
        for (version, files) in versions { archives[version] = shop.dir + "/" + (try shop.archive("z.app", version, files: files)) }
        return (w, try RunningSupervisor(w, args: ["--config", try shop.config(extra: config)]), archives)
    }

    /// Lets z.app's new version past its startup gate (TestKit's `startup-gate`).
    private func openGate(_ w: TestWorld) throws {
        try "".write(toFile: w.home + "/data/z.app/go", atomically: true, encoding: .utf8)
    }

    /// Waits for z.app's new version to be starting beside the old one (`status`'s `updating`). The
    /// new version waits at its startup gate until the test opens it, so the window lasts until the
    /// test has seen it. (Fixed delays were missed now and then in full-suite runs: the first
    /// `status` poll, spawned at the same moment as the `Background` install, was seen to end only
    /// when the install ended, 1.6 s and 10 s later: Foundation's `Process` race, see `Shell`.) On a
    /// timeout the failure lists what each poll answered and how long it took, what the `install`
    /// came to if it has finished, and the supervisor's log.
    private func startingBeside(_ sv: RunningSupervisor, install: Background<Shell.Result>) throws -> PluginStatus.Updating {
        var polls: [String] = []
        let started = Date()
        do {
            return try sv.waitFor(timeout: 30, "2.0.0 starting beside 1.0.0") {
                let asked = Date()
                let r = try sv.cli("status", "--json")
                let ms = { (from: Date, to: Date) in Int(to.timeIntervalSince(from) * 1000) }
                polls.append("at \(ms(started, asked)) ms, took \(ms(asked, Date())) ms (launch \(r.launchMs) ms), exit \(r.code): \(r.out.prefix(400))\(r.err)")
                guard r.code == 0 else { throw HarnessError("status failed: \(r.err)") }
                let all = try JSONDecoder().decode([PluginStatus].self, from: Data(r.out.utf8))
                guard let app = all.first(where: { $0.identifier == "z.app" }) else { throw HarnessError("no z.app in status") }
                return app.updating
            }
        } catch {
            var seen: String = "status polls:\n" + polls.joined(separator: "\n")
            switch install.finished {
            case nil: seen += "\nthe install has not finished"
            case .success(let r)?: seen += "\nthe install ended with exit \(r.code): \(r.out.prefix(400)) \(r.err.prefix(2000))"
            case .failure(let e)?: seen += "\nthe install failed to run: \(e)"
            }
            seen += "\nthe supervisor's log:\n" + sv.log.suffix(6000)
            Issue.record(Comment(rawValue: seen))
            throw error
        }
    }

    @Test("four callers in a loop see 0 failed calls while the plugin is restarted three times and reloaded with a changed bundle")
    func restartsAndReloadLoseNothing() throws {
        let w = try TestWorld()
        let bundle = try w.bundle("z.one")
        let sv = try RunningSupervisor(w)
        let callers = Callers(socket: sv.socket, target: "z.one", count: 4)
        try sv.waitUntil("calls flowing") { callers.tally.seen.ok > 50 }
        var pid = try sv.plugin("z.one").pid
        for i in 1...3 {
            let before = callers.tally.seen.ok
            let r = try sv.cli("restart", "z.one")
            #expect(r.code == 0, "restart \(i): \(r.err)")
            let now = try sv.plugin("z.one")
            #expect(now.pid != pid && now.state == "running")
            pid = now.pid
            try sv.waitUntil("calls after restart \(i)") { callers.tally.seen.ok > before + 50 }
        }
        // A changed manifest on disk: the reload restarts it, draining the same way.
        var manifest = try String(contentsOfFile: bundle + "/plugin.json", encoding: .utf8)
        manifest = manifest.replacingOccurrences(of: "\"1.0.0\"", with: "\"1.0.1\"")
        try manifest.write(toFile: bundle + "/plugin.json", atomically: true, encoding: .utf8)
        let before = callers.tally.seen.ok
        let reload = try sv.cli("reload")
        #expect(reload.code == 0 && reload.out.contains(#""changed":1"#), "\(reload.out)\(reload.err)")
        #expect(try sv.plugin("z.one").version == "1.0.1")
        try sv.waitUntil("calls after the reload") { callers.tally.seen.ok > before + 50 }
        // Calls flowed throughout: 50 more were answered after each step (the waits above). A total
        // count is no measure of it: the faster the restarts, the fewer calls fit in the test.
        try callers.stopExpectingNoFailure(sv)
    }

    @Test("an update under load starts the new version beside the old one, which serves every call until the new one runs; no call is lost, through the supervisor or over a dependent's peer link")
    func updateLosesNothing() throws {
        // The new version's startup waits at its gate until the test has seen who serves meanwhile.
        let (w, sv, archives) = try appUpdates(["2.0.0": ["startup-gate": ""]], dependent: true)
        let oldPID = try #require(try sv.plugin("z.app").pid)
        let callers = Callers(socket: sv.socket, target: "z.app", count: 3)
        // And z.user calling z.app, over a peer link once the first call has made it.
        let linked = Callers(socket: sv.socket, target: "z.app", via: "z.user", count: 2)
        try sv.waitUntil("calls flowing") { callers.tally.seen.ok > 50 && linked.tally.seen.ok > 50 }
        try sv.waitUntil("z.user linked to z.app") { try sv.plugin("z.user").links == ["z.app"] }
        let install = Background { try sv.cli("install", archives["2.0.0"]!) }
        let next = try startingBeside(sv, install: install)
        #expect(next.version == "2.0.0" && next.pid != oldPID)
        // While 2.0.0 starts, 1.0.0's worker answers: calls keep coming back, and it still serves.
        try callers.waitForMore(sv, "calls answered while 2.0.0 starts")
        let during = try sv.plugin("z.app")
        #expect(during.updating != nil && during.pid == oldPID && during.version == "1.0.0" && during.state == "running",
                "the old worker did not serve while the new one started: \(during)")
        #expect(try sv.cli("status").out.contains("z.app: 2.0.0 is starting beside 1.0.0 (pid \(next.pid))"))
        try openGate(w)
        let r = try install.wait()
        #expect(r.code == 0, "\(r.err)")
        let after = try sv.plugin("z.app")
        #expect(after.version == "2.0.0" && after.pid == next.pid && after.updating == nil, "\(after)")
        // The old worker drained and got willTerminate.
        try sv.waitUntil("the old worker to end") { kill(oldPID, 0) != 0 }
        #expect(sv.log.contains("z.app 2.0.0 is running and takes the calls; 1.0.0 finishes its own"))
        let terminated = (try? String(contentsOfFile: w.home + "/data/z.app/terminated", encoding: .utf8)) ?? ""
        #expect(terminated.split(separator: "\n").count == 1, "willTerminate went to the old worker once: \(terminated)")
        try callers.waitForMore(sv, "calls to the new version")
        try linked.waitForMore(sv, "z.user's calls to the new version")
        // The old version's link was taken back before it drained; the new one gets its own.
        try sv.waitUntil("z.user linked to 2.0.0") { try sv.plugin("z.user").links == ["z.app"] }
        try callers.stopExpectingNoFailure(sv)
        try linked.stopExpectingNoFailure(sv)
        // Its dependent heard of the switch once (an event sent after it is handled after it).
        #expect(try sv.cli("send", "memoryWarning", "--plugin", "z.user").code == 0)
        let heard = try sv.info("z.user").names
        #expect(heard.contains("memoryWarning"))
        #expect(heard.filter { $0 == "dependencyRestarted:z.app" }.count == 1, "\(heard)")
    }

    @Test("with standbyWorkers always: an update still starts beside the old worker (the old version's standby goes, unloaded), and the new version gets a standby of its own")
    func updateWithAKeptStandby() throws {
        let (_, sv, archives) = try appUpdates(["2.0.0": [:]], config: ["standbyWorkers": "always"])
        let oldStandby = try sv.waitFor("a standby for z.app") { try sv.plugin("z.app").standbyPid }
        let r = try sv.cli("install", archives["2.0.0"]!)
        #expect(r.code == 0, "\(r.err)")
        #expect(sv.log.contains("starting z.app 2.0.0 beside 1.0.0"), "the update did not start beside the old worker")
        try sv.waitUntil("2.0.0 with a standby of its own") {
            let p = try sv.plugin("z.app")
            return p.version == "2.0.0" && p.standbyPid != nil && p.standbyPid != oldStandby
        }
        try sv.waitUntil("1.0.0's standby gone") { kill(oldStandby, 0) != 0 || isZombie(oldStandby) }
    }

    @Test("while an update's new version starts: a reload leaves it alone, another install or an uninstall is refused, a restart stops the new version and the old one goes on")
    func updateInterrupted() throws {
        // The new version's startup waits at its gate, which stays shut: the restart below ends it.
        let (w, sv, archives) = try appUpdates(["2.0.0": ["startup-gate": ""], "2.0.1": [:]])
        let callers = Callers(socket: sv.socket, target: "z.app", count: 2)
        try sv.waitUntil("calls flowing") { callers.tally.seen.ok > 50 }
        let install = Background { try sv.cli("install", archives["2.0.0"]!) }
        let next = try startingBeside(sv, install: install)
        // A reload meanwhile sees 2.0.0's files on disk, and leaves them to the update.
        let reload = try sv.cli("reload")
        #expect(reload.code == 0 && reload.out.contains(#""changed":0"#), "\(reload.out)\(reload.err)")
        #expect(try sv.plugin("z.app").updating?.pid == next.pid)
        let second = try sv.cli("install", archives["2.0.1"]!)
        #expect(second.code != 0 && second.err.contains("conflict") && second.err.contains("being updated"), "\(second.err)")
        let uninstall = try sv.cli("uninstall", "z.app")
        #expect(uninstall.code != 0 && uninstall.err.contains("being updated"), "\(uninstall.err)")
        let restart = try sv.cli("restart", "z.app")
        #expect(restart.code == 0, "\(restart.err)")
        let r = try install.wait()
        #expect(r.code != 0 && r.err.contains("stopped before the new version took over") && r.err.contains("rolled back to 1.0.0"), "\(r.err)")
        let p = try sv.plugin("z.app")
        #expect(p.state == "running" && p.version == "1.0.0" && p.updating == nil && p.pid != next.pid, "\(p)")
        #expect(w.installed()["z.app"] == "1.0.0")
        try sv.waitUntil("the new version's worker to end") { kill(next.pid, 0) != 0 }
        try callers.waitForMore(sv, "calls after the restart")
        try callers.stopExpectingNoFailure(sv)
    }

    @Test("a supervisor killed while an update's new version starts: the next start puts the previous version back, runs it, and tries the update again beside it")
    func killedWhileTheNewVersionStarts() throws {
        let (w, sv, archives) = try appUpdates(["2.0.0": ["startup-gate": ""]])
        let install = Background { try sv.cli("install", archives["2.0.0"]!) }
        _ = try startingBeside(sv, install: install)
        #expect(w.installed()["z.app"] == "2.0.0", "the new version is in place while it starts")
        kill(sv.pid, SIGKILL)
        _ = try sv.waitForExit()
        _ = try install.wait()
        let again = try RunningSupervisor(w, args: Array(sv.process.arguments!.dropFirst(5)))
        let back = try again.plugin("z.app")
        #expect(back.version == "1.0.0" && back.state == "running", "\(back)")
        #expect(again.log.contains("z.app: its update to 2.0.0 had not ended when the supervisor stopped; 1.0.0 was put back and runs, and 2.0.0 is tried again"),
                "\(again.log)")
        // The update is under way again, the previous version serving meanwhile.
        let next = try again.waitFor("2.0.0 starting beside 1.0.0 again") { try again.plugin("z.app").updating }
        let answered = try again.call("z.app", "echo", "[1]", as: [Int].self)
        #expect(next.version == "2.0.0" && answered == [1])
        try openGate(w)
        try again.waitUntil("the update done") { again.log.contains("z.app: the interrupted update is done: z.app 2.0.0 (was 1.0.0)") }
        let after = try again.plugin("z.app")
        #expect(after.version == "2.0.0" && after.state == "running" && after.updating == nil, "\(after)")
        #expect(w.installed()["z.app"] == "2.0.0")
    }

    @Test("a supervisor killed within an update's grace period: the new version is tried again, and a crash within the new grace still rolls back to the previous one; installed again, the rollback is no longer its last error")
    func killedWithinTheGracePeriod() throws {
        // A grace period longer than the test takes (the shop's is 1 s).
        let (w, sv, archives) = try appUpdates(["2.0.0": [:]], config: ["updateGraceSeconds": 30])
        let r = try sv.cli("install", archives["2.0.0"]!)
        #expect(r.code == 0, "\(r.err)")
        #expect(try sv.plugin("z.app").version == "2.0.0")
        kill(sv.pid, SIGKILL)
        _ = try sv.waitForExit()
        let again = try RunningSupervisor(w, args: Array(sv.process.arguments!.dropFirst(5)))
        try again.waitUntil("the update done again") { again.log.contains("z.app: the interrupted update is done") }
        #expect(try again.plugin("z.app").version == "2.0.0")
        // Within the new grace period, the new version crashes: 1.0.0 is what runs after it.
        _ = try again.cli("call", "z.app", "crash", #"{"how":"segv"}"#)
        try again.waitUntil("rolled back to 1.0.0") {
            let p = try again.plugin("z.app")
            return p.version == "1.0.0" && p.state == "running"
        }
        #expect(w.installed()["z.app"] == "1.0.0")
        #expect(again.log.contains("z.app 2.0.0 crashed within 30 s of its update"), "\(again.log)")
        try again.waitUntil("staging empty") { (try FileManager.default.contentsOfDirectory(atPath: w.home + "/staging")).isEmpty }
        #expect(try again.plugin("z.app").lastError?.contains("the update to 2.0.0 was rolled back to 1.0.0") == true)
        // Installed again, it runs: the earlier rollback is no longer its last error.
        let retried = try again.cli("install", archives["2.0.0"]!)
        #expect(retried.code == 0, "\(retried.err)")
        let now = try again.plugin("z.app")
        #expect(now.version == "2.0.0" && now.lastError == nil, "\(now)")
    }

    @Test("a shutdown while an update's new version starts: the update fails and is rolled back, both workers end, exit 0")
    func shutdownDuringUpdate() throws {
        let (w, sv, archives) = try appUpdates(["2.0.0": ["startup-gate": ""]])
        let oldPID = try #require(try sv.plugin("z.app").pid)
        let install = Background { try sv.cli("install", archives["2.0.0"]!) }
        let next = try startingBeside(sv, install: install)
        // Its startup has begun (so it said hello and will hear willTerminate, not a bare SIGKILL).
        try sv.waitUntil("2.0.0 at its startup gate") { access(w.home + "/data/z.app/at-gate", F_OK) == 0 }
        sv.signal(SIGTERM)
        #expect(try sv.waitForExit() == 0)
        // willTerminate reached both workers: the new version's startup (held at its gate) was
        // cancelled by it, instead of holding it up until the grace period's SIGKILL.
        let terminated = (try? String(contentsOfFile: w.home + "/data/z.app/terminated", encoding: .utf8)) ?? ""
        #expect(terminated.split(separator: "\n").count == 2, "willTerminate handled \(terminated.split(separator: "\n").count) times, not by both workers")
        let r = try install.wait()
        #expect(r.code != 0, "the install was answered as if it had worked: \(r.out)")
        #expect(w.installed()["z.app"] == "1.0.0", "the new version was left on disk")
        #expect(kill(oldPID, 0) != 0 && kill(next.pid, 0) != 0, "a worker outlived the supervisor")
    }

    @Test("the old worker crashes while the new version starts beside it: calls wait for the new one, which takes over")
    func oldCrashesDuringUpdate() throws {
        let (w, sv, archives) = try appUpdates(["2.0.0": ["startup-gate": ""]])
        let install = Background { try sv.cli("install", archives["2.0.0"]!) }
        let next = try startingBeside(sv, install: install)
        let crash = try sv.cli("call", "z.app", "crash", #"{"how":"segv"}"#)
        #expect(crash.code != 0)
        try sv.waitUntil("the plugin waiting for 2.0.0") { try sv.plugin("z.app").state == "restarting" }
        // Made while nothing serves: it waits, and is answered by 2.0.0 (1.0.0 was not restarted).
        // A `status` on the same connection is answered after the call was taken in, so the call
        // is waiting before the gate opens.
        let conn = try rawControl(sv.socket)
        defer { conn.close() }
        try conn.sendFrame(callFrame(id: 1, target: "z.app", method: "info"))
        var status = FrameBuilder(kind: .status)
        status.uint("id", 2)
        try conn.sendFrame(status.finish())
        let first = try #require(try conn.receiveFrame())
        #expect(try first.withUnsafeBytes { try Envelope.parse($0).id } == 2, "the call was answered while nothing served: \(String(decoding: first, as: UTF8.self))")
        try openGate(w)
        let answer = try #require(try conn.receiveFrame())
        let info = try answer.withUnsafeBytes { bytes in
            let env = try Envelope.parse(bytes)
            #expect(env.id == 1 && env.error == nil, "\(String(decoding: bytes, as: UTF8.self))")
            return try JSONDecoder().decode(KitInfo.self, from: Data(bytes[try #require(env.result)]))
        }
        #expect(info.names.contains("startup"))
        let r = try install.wait()
        #expect(r.code == 0, "\(r.err)")
        let p = try sv.plugin("z.app")
        #expect(p.state == "running" && p.version == "2.0.0" && p.pid == next.pid && p.restarts == 0, "\(p)")
        #expect(w.installed()["z.app"] == "2.0.0")
    }

    @Test("a call made right after start, before ready, is answered once the plugin runs")
    func callBeforeReady() throws {
        let w = try TestWorld()
        let bundle = try w.bundle("z.slow")
        try "400".write(toFile: bundle + "/startup-delay-ms", atomically: true, encoding: .utf8)
        let sv = try RunningSupervisor(w, waitForReady: false)
        try sv.waitUntilListening()
        let readyBefore = sv.stdout.contains("ready")
        let r = try sv.cli("call", "z.slow", "echo", "[7]")
        #expect(!readyBefore, "the plugin was already running when the call was made")
        #expect(r.code == 0 && r.out.contains("7"), "\(r.err)")
        try sv.waitForReady()
    }

    @Test("waiting calls: a full queue fails at once, a failed plugin fails its queue within a second, a waiting call times out on its own deadline")
    func queueBoundsAndFailures() throws {
        let w = try TestWorld()
        let slow = try w.bundle("z.slow")
        try "1500".write(toFile: slow + "/startup-delay-ms", atomically: true, encoding: .utf8)
        let broken = try w.bundle("z.broken", extra: ["restart": "always"])
        try "".write(toFile: broken + "/crash-in-startup", atomically: true, encoding: .utf8)
        let config = w.root + "/config.json"
        try #"{"callQueueLimit": 2, "restartLimit": 3, "restartWindowSeconds": 60, "restartBackoffBaseMs": 100}"#
            .write(toFile: config, atomically: true, encoding: .utf8)
        let sv = try RunningSupervisor(w, args: ["--config", config], waitForReady: false)
        try sv.waitUntilListening()
        let conn = try rawControl(sv.socket)
        defer { conn.close() }
        func send(_ id: UInt64, _ target: String, timeoutMs: UInt64 = 20_000) throws {
            try conn.sendFrame(callFrame(id: id, target: target, method: "echo", params: "[\(id)]", timeoutMs: timeoutMs))
        }
        // z.slow: two wait, the third finds the queue full.
        try send(1, "z.slow")
        try send(2, "z.slow")
        try send(3, "z.slow")
        var answers: [UInt64: String] = [:]
        func receive() throws {
            let frame = try #require(try conn.receiveFrame())
            let id = try #require(try frame.withUnsafeBytes { try Envelope.parse($0).id })
            answers[id] = String(decoding: frame, as: UTF8.self)
        }
        try receive()
        #expect(answers[3]?.contains("callQueueLimit") == true, "\(answers)")
        // z.broken crashes in every startup: after its restarts it is failed, and what waited fails then.
        let sent = Date()
        try send(4, "z.broken")
        try receive(); try receive(); try receive()
        #expect(answers[1]?.contains("\"result\":[1]") == true, "\(answers)")
        #expect(answers[2]?.contains("\"result\":[2]") == true, "\(answers)")
        let failedAnswer = try #require(answers[4])
        #expect(failedAnswer.contains("unavailable"), "\(failedAnswer)")
        #expect(try sv.plugin("z.broken").state == "failed")
        #expect(Date().timeIntervalSince(sent) < 10, "the waiting call was failed at its timeout, not when the plugin failed")
        // A call that waits longer than its own timeout gets `timeout`: restart z.slow (1.5 s to
        // start) without waiting for it, and call it with 200 ms to spare.
        try sv.waitForReady()
        let restarter = try rawControl(sv.socket)
        defer { restarter.close() }
        var restart = FrameBuilder(kind: .restart)
        restart.uint("id", 1)
        restart.string("target", "z.slow")
        try restarter.sendFrame(restart.finish())
        try sv.waitUntil("z.slow restarting") { try sv.plugin("z.slow").state != "running" }
        let asked = Date()
        try send(5, "z.slow", timeoutMs: 200)
        try receive()
        #expect(answers[5]?.contains("timeout") == true, "\(answers[5] ?? "")")
        #expect(Date().timeIntervalSince(asked) < 1.2)
        let restarted = String(decoding: try #require(try restarter.receiveFrame()), as: UTF8.self)
        #expect(restarted.contains("running"), "\(restarted)")
    }

    @Test("a restart lets the calls inside the worker finish before willTerminate; calls made meanwhile go to the next worker")
    func restartDrainsCallsInside() throws {
        let w = try TestWorld()
        try w.bundle("z.one")
        let sv = try RunningSupervisor(w)
        let pid = try sv.plugin("z.one").pid
        let conn = try rawControl(sv.socket)
        defer { conn.close() }
        try conn.sendFrame(callFrame(id: 1, target: "z.one", method: "sleep", params: #"{"ms":600}"#))
        try sv.waitUntil("the slow call inside the worker") { try sv.info("z.one").names.contains("sleeping:600") }
        let restarter = try rawControl(sv.socket)
        defer { restarter.close() }
        var restart = FrameBuilder(kind: .restart)
        restart.uint("id", 1)
        restart.string("target", "z.one")
        try restarter.sendFrame(restart.finish())
        // The restart is draining the one call inside the worker: calls made now must wait.
        try sv.waitUntil("the drain") { sv.log.contains("waiting for 1 call(s) inside the worker") }
        // A second restart asked during the drain joins the first: one new worker, one restart.
        let second = try rawControl(sv.socket)
        defer { second.close() }
        try second.sendFrame(restart.finish())
        try conn.sendFrame(callFrame(id: 2, target: "z.one", method: "info"))
        var answers: [UInt64: String] = [:]
        for _ in 0..<2 {
            let frame = try #require(try conn.receiveFrame())
            answers[try #require(try frame.withUnsafeBytes { try Envelope.parse($0).id })] = String(decoding: frame, as: UTF8.self)
        }
        #expect(answers[1]?.contains("\"result\":600") == true, "the call inside the worker was not let finish: \(answers[1] ?? "")")
        let info = try #require(answers[2])
        #expect(info.contains("\"pid\"") && !info.contains("\"pid\":\(pid!)"), "the call made during the drain went to the old worker: \(info)")
        #expect(String(decoding: try #require(try restarter.receiveFrame()), as: UTF8.self).contains("running"))
        #expect(String(decoding: try #require(try second.receiveFrame()), as: UTF8.self).contains("running"))
        let after = try sv.plugin("z.one")
        #expect(after.restarts == 1 && after.state == "running", "\(after)")
    }

    @Test("an update whose new version fails or crashes in its startup leaves the old worker serving with 0 failed calls; one that crashes within its grace period is rolled back, failing only the calls inside it")
    func badUpdatesRollBack() throws {
        let (w, sv, archives) = try appUpdates(["2.0.0": ["fail-startup": "x"], "2.1.0": ["crash-in-startup": "x"],
                                                   "3.0.0": ["crash-after-start": "x"]])
        let oldPID = try sv.plugin("z.app").pid
        let callers = Callers(socket: sv.socket, target: "z.app", count: 3)
        try sv.waitUntil("calls flowing") { callers.tally.seen.ok > 50 }

        // 2.0.0 refuses to start, 2.1.0 crashes in its startup: each beside 1.0.0, whose worker
        // serves throughout and is never stopped; the files go back at once.
        for version in ["2.0.0", "2.1.0"] {
            let failed = try sv.cli("install", archives[version]!)
            #expect(failed.code != 0 && failed.err.contains("\(version) failed to start") && failed.err.contains("rolled back to 1.0.0"), "\(failed.err)")
            let p = try sv.plugin("z.app")
            #expect(p.state == "running" && p.version == "1.0.0" && p.pid == oldPID && p.updating == nil, "\(p)")
            #expect(w.installed()["z.app"] == "1.0.0")
            try callers.waitForMore(sv, "calls to 1.0.0 after \(version) failed")
        }
        let untilThen = callers.tally.seen
        #expect(untilThen.failures.isEmpty, "\(untilThen.failures.count) failed calls, first: \(untilThen.failures.first ?? "")")

        // 3.0.0 takes over, then crashes within the grace period: rolled back.
        let installed = try sv.cli("install", archives["3.0.0"]!)
        #expect(installed.code == 0, "\(installed.err)")
        try sv.waitUntil("the rollback after the crash") {
            let p = try sv.plugin("z.app")
            return p.state == "running" && p.version == "1.0.0" && (p.lastError ?? "").contains("rolled back to 1.0.0")
        }
        #expect(w.installed()["z.app"] == "1.0.0", "the previous version is not back on disk")
        #expect(try sv.cli("status").out.contains("z.app: last error: the update to 3.0.0 was rolled back to 1.0.0"))
        #expect(sv.log.contains("crashed within 1 s of its update"), "the grace period is 1 s in the shop's config")
        try callers.waitForMore(sv, "calls after the rollback")
        try callers.stop(sv)
        let seen = callers.tally.seen
        // Only calls the crashed worker's plugin had started could fail (its echo is not idempotent);
        // the crash comes 0.3 s after start while the callers keep it busy, so allow those, and nothing else.
        for failure in seen.failures { #expect(failure.contains("after its plugin started") && failure.contains(#""started":true"#), "\(failure)") }
        #expect(seen.failures.count <= 3, "\(seen.failures.count) failed calls: \(seen.failures.prefix(3))")
    }

    @Test("at shutdown the calls inside a worker are let finish; a call made meanwhile fails at once with the reason")
    func shutdownDrains() throws {
        let w = try TestWorld()
        try w.bundle("z.one")
        let sv = try RunningSupervisor(w)
        let conn = try rawControl(sv.socket)
        defer { conn.close() }
        try conn.sendFrame(callFrame(id: 1, target: "z.one", method: "sleep", params: #"{"ms":600}"#))
        try sv.waitUntil("the slow call inside the worker") { try sv.info("z.one").names.contains("sleeping:600") }
        sv.signal(SIGTERM)
        try sv.waitUntil("the drain at shutdown") { sv.log.contains("waiting for 1 call(s) inside the worker") }
        let late = try sv.cli("call", "z.one", "echo", "[1]")
        #expect(late.code != 0 && late.err.contains("the supervisor is shutting down"), "\(late.err)")
        let answer = String(decoding: try #require(try conn.receiveFrame()), as: UTF8.self)
        #expect(answer.contains("\"result\":600"), "the call inside the worker was cut off: \(answer)")
        #expect(try sv.waitForExit() == 0)
    }
}
