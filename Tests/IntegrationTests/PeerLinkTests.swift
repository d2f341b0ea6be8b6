import Foundation
import IPC
import PluginProtocol
import Testing

/// Peer links (docs/protocol.md "Peer links"): after a plugin's first call to a dependency, its
/// calls go over a direct link between the two workers, with what the supervisor does for a call
/// done by the workers instead.
@Suite(.serialized, .timeLimit(.minutes(3)))
struct PeerLinkTests {
    /// `via`'s `call` method calling `target`; the CLI's result or error.
    private func nested(_ sv: RunningSupervisor, _ via: String, _ target: String, _ method: String, _ params: String = "null",
                        traceparent: String? = nil) throws -> Shell.Result {
        var args = ["call", via, "call", #"{"target":"\#(target)","method":"\#(method)","params":\#(params)}"#]
        if let traceparent { args += ["--traceparent", traceparent] }
        return try sv.cli(args)
    }

    private func waitForLink(_ sv: RunningSupervisor, from caller: String, to callee: String) throws {
        try sv.waitUntil("a link from \(caller) to \(callee)") { try sv.plugin(caller).links == [callee] }
    }

    @Test("after the first call a link carries the calls: results, errors, from, trace, timeout with cancel, metrics as through the supervisor")
    func callsOverALink() throws {
        let w = try TestWorld()
        try w.bundle("l.base", extra: ["limits": ["callTimeoutMs": 400]])
        try w.bundle("l.user", deps: [Dep("l.base")])
        try w.bundle("l.other")
        let sv = try RunningSupervisor(w)
        let before = try Prometheus(sv.cli("metrics").out)
        #expect(try sv.plugin("l.user").links == nil, "no link before a call")
        #expect(try nested(sv, "l.user", "l.base", "echo", #"{"x":1}"#).out.contains(#""x":1"#))
        try waitForLink(sv, from: "l.user", to: "l.base")
        #expect(try sv.plugin("l.base").links == nil, "a link goes one way: from the caller")
        #expect(try sv.cli("status").out.contains("l.user: calls l.base over a direct link"))

        // Over the link: results and errors as before.
        for i in 0..<6 {
            let r = try nested(sv, "l.user", "l.base", "echo", "[\(i)]")
            #expect(r.code == 0 && r.out.contains("[\(i)]"), "\(r.out)\(r.err)")
        }
        let failed = try nested(sv, "l.user", "l.base", "fail")
        #expect(failed.code != 0 && failed.err.contains("custom: failed on purpose"), "\(failed.err)")
        // Not a dependency: still denied by the supervisor, with no link made.
        let denied = try nested(sv, "l.user", "l.other", "echo", "1")
        #expect(denied.err.contains("denied"))
        #expect(try sv.plugin("l.user").links == ["l.base"])

        // The callee sees a traceparent in the caller's trace with a span of its own.
        let trace = "4bf92f3577b34da6a3ce929d0e0e4736"
        let seen = try nested(sv, "l.user", "l.base", "traceparent", traceparent: "00-\(trace)-00f067aa0ba902b7-01")
        let parts = try JSONDecoder().decode(String.self, from: Data(seen.out.utf8)).split(separator: "-")
        #expect(parts.count == 4 && parts[1] == trace && parts[2] != "00f067aa0ba902b7" && parts[3] == "01", "\(seen.out)")

        // The calls over the link are counted for l.base as calls through the supervisor are
        // (the caller's worker reports them within a quarter of a second).
        func delta(_ a: Prometheus, _ b: Prometheus, _ outcome: String) -> Double {
            (b["plugin_calls_total", ["plugin": "l.base", "outcome": outcome]] ?? 0) - (a["plugin_calls_total", ["plugin": "l.base", "outcome": outcome]] ?? 0)
        }
        func observed(_ a: Prometheus, _ b: Prometheus) -> Double {
            (b["plugin_call_duration_seconds_count", ["plugin": "l.base"]] ?? 0) - (a["plugin_call_duration_seconds_count", ["plugin": "l.base"]] ?? 0)
        }
        try sv.waitUntil("the link's calls in the metrics") {
            let now = try Prometheus(sv.cli("metrics").out)
            // 7 echoes (the first through the supervisor) and the traceparent call; 1 error.
            return delta(before, now, "ok") == 8 && delta(before, now, "error") == 1 && observed(before, now) == 9
        }

        // The callee's timeout (400 ms) is kept by the caller's worker: `timeout`, counted, and
        // the callee is told to cancel (its handler records it).
        let beforeTimeout = try Prometheus(sv.cli("metrics").out)
        let slow = try nested(sv, "l.user", "l.base", "sleep", #"{"ms":5000}"#)
        #expect(slow.err.contains("timeout: l.base did not answer call in time"), "\(slow.err)")
        try sv.waitUntil("the timeout in the metrics") { delta(beforeTimeout, try Prometheus(sv.cli("metrics").out), "timeout") == 1 }
        try sv.waitUntil("the cancel at l.base") { try sv.info("l.base").names.contains("cancelled:5000") }
        #expect(try sv.plugin("l.user").links == ["l.base"])
    }

    @Test("the callee crashes with a call on the link: that call, started, fails unavailable, the next waits for the restart, a new link follows")
    func calleeCrashes() throws {
        let w = try TestWorld()
        try w.bundle("c.base", extra: ["restart": "always"])
        try w.bundle("c.user", deps: [Dep("c.base")])
        let sv = try RunningSupervisor(w)
        #expect(try nested(sv, "c.user", "c.base", "echo", "[1]").code == 0)
        try waitForLink(sv, from: "c.user", to: "c.base")
        let pid = try sv.plugin("c.base").pid
        let crashed = try nested(sv, "c.user", "c.base", "crash", #"{"how":"segv"}"#)
        // Its plugin had started it, and it is not idempotent: not run again (SPEC §15).
        #expect(crashed.err.contains("unavailable: c.base's worker ended") && crashed.err.contains("after its plugin started crash"), "\(crashed.err)")
        // The caller goes through the supervisor again: the call waits for the restarted worker.
        let after = try nested(sv, "c.user", "c.base", "echo", "[2]")
        #expect(after.code == 0 && after.out.contains("[2]"), "\(after.err)")
        #expect(try sv.plugin("c.base").pid != pid)
        try waitForLink(sv, from: "c.user", to: "c.base")
        #expect(try nested(sv, "c.user", "c.base", "echo", "[3]").out.contains("[3]"))
        #expect(try sv.plugin("c.user").state == "running")
    }

    @Test("a call that waited for its callee to come up (a restart) makes the link when it is forwarded")
    func linkAfterWaiting() throws {
        let w = try TestWorld()
        let base = try w.bundle("q.base")
        try w.bundle("q.user", deps: [Dep("q.base")])
        let sv = try RunningSupervisor(w)
        #expect(try nested(sv, "q.user", "q.base", "echo", "[1]").code == 0)
        try waitForLink(sv, from: "q.user", to: "q.base")
        // The next worker of q.base takes 1.5 s in its startup: a call made meanwhile waits.
        try "1500".write(toFile: base + "/startup-delay-ms", atomically: true, encoding: .utf8)
        let restart = Background { try sv.cli("restart", "q.base") }
        try sv.waitUntil("q.base coming up again") { try sv.plugin("q.base").state != "running" }
        #expect(try sv.plugin("q.user").links == nil, "the old worker's link is gone")
        let waited = try nested(sv, "q.user", "q.base", "echo", "[2]")
        #expect(waited.code == 0 && waited.out.contains("[2]"), "\(waited.err)")
        #expect(try restart.wait().code == 0)
        try waitForLink(sv, from: "q.user", to: "q.base")
    }

    @Test("the caller crashes with a call on the link: the callee is told to cancel it and goes on serving")
    func callerCrashes() throws {
        let w = try TestWorld()
        try w.bundle("d.base")
        try w.bundle("d.user", deps: [Dep("d.base")], extra: ["restart": "always"])
        let sv = try RunningSupervisor(w)
        #expect(try nested(sv, "d.user", "d.base", "echo", "[1]").code == 0)
        try waitForLink(sv, from: "d.user", to: "d.base")
        let slow = Background { try self.nested(sv, "d.user", "d.base", "sleep", #"{"ms":20000}"#) }
        try sv.waitUntil("the call inside d.base") { try sv.info("d.base").names.contains("sleeping:20000") }
        let callerPID = try #require(try sv.plugin("d.user").pid)
        let calleePID = try sv.plugin("d.base").pid
        #expect(kill(callerPID, SIGKILL) == 0)
        #expect(try slow.wait().err.contains("unavailable"))
        try sv.waitUntil("the cancel at d.base") { try sv.info("d.base").names.contains("cancelled:20000") }
        // The callee goes on as it was (the SDK does not answer a cancelled call; an answer a C
        // plugin sends anyway is dropped by its worker, whose ids the supervisor never gave).
        #expect(try sv.plugin("d.base").pid == calleePID && sv.plugin("d.base").restarts == 0)
        try sv.waitUntil("d.user restarted") { let p = try sv.plugin("d.user"); return p.state == "running" && p.pid != callerPID }
        #expect(try nested(sv, "d.user", "d.base", "echo", "[2]").out.contains("[2]"))
        try waitForLink(sv, from: "d.user", to: "d.base")
    }

    @Test("a C plugin that answers the cancel of a call whose caller ended: its worker drops that late answer (no id the supervisor gave), and it goes on")
    func lateReplyDropped() throws {
        let w = try TestWorld()
        try w.bundle("r.base", library: try SandboxTests.hostileLibrary())
        try w.bundle("r.user", deps: [Dep("r.base")], extra: ["restart": "never"])
        let sv = try RunningSupervisor(w)
        #expect(try nested(sv, "r.user", "r.base", "getpid").code == 0)
        try waitForLink(sv, from: "r.user", to: "r.base")
        let calleePID = try sv.plugin("r.base").pid
        // Over the link, a call r.base never answers; then the caller ends.
        let waiting = Background { try self.nested(sv, "r.user", "r.base", "noReply") }
        let callerPID = try #require(try sv.plugin("r.user").pid)
        try sv.waitUntil("the call inside r.base") { try sv.call("r.base", "noReplies", as: Int.self) == 1 }
        #expect(kill(callerPID, SIGKILL) == 0)
        #expect(try waiting.wait().err.contains("unavailable"))
        try sv.waitUntil("r.user ended") { try sv.plugin("r.user").state == "failed" || sv.plugin("r.user").state == "stopped" }
        // r.base got the cancel and answered it with the call's id, which only its worker knows:
        // dropped there. It was not ended for a reply to an id the supervisor never gave.
        #expect(try sv.cli("call", "r.base", "getpid").code == 0)
        let after = try sv.plugin("r.base")
        #expect(after.pid == calleePID && after.restarts == 0 && after.lastExit == nil, "\(after)")
        #expect(!sv.log.contains("protocolViolation") && !sv.log.contains("never asked"))
    }

    @Test("a link that breaks while both workers run (the callee writes junk on it) is forgotten by the supervisor: the next call makes a new one")
    func brokenLinkIsReplaced() throws {
        let w = try TestWorld()
        try w.bundle("b.base", library: try SandboxTests.hostileLibrary())
        try w.bundle("b.user", deps: [Dep("b.base")])
        let sv = try RunningSupervisor(w)
        #expect(try nested(sv, "b.user", "b.base", "getpid").code == 0)
        try waitForLink(sv, from: "b.user", to: "b.base")
        // Over the link: b.base breaks it before its answer, so the answer never arrives whole.
        let broken = try nested(sv, "b.user", "b.base", "breakLinks")
        // Sent again through the supervisor, which knows no crash behind the link: it may have
        // started, and is not run again (SPEC §15).
        #expect(broken.err.contains("unavailable: the link to b.base ended with breakLinks in flight and no crash of its worker is known"),
                "\(broken.out)\(broken.err)")
        try sv.waitUntil("the broken link forgotten") { try sv.plugin("b.user").links == nil }
        // Both workers run on; the next call goes through the supervisor and makes a new link.
        #expect(try sv.plugin("b.base").restarts == 0 && sv.plugin("b.user").restarts == 0)
        #expect(try nested(sv, "b.user", "b.base", "getpid").code == 0)
        try waitForLink(sv, from: "b.user", to: "b.base")
        #expect(try nested(sv, "b.user", "b.base", "getpid").code == 0)
    }

    @Test("a link its callee's worker ends (the caller wrote a frame no link may carry) ends for the caller too: its next call goes through the supervisor and is answered, not lost in the dead link")
    func aLinkTheCalleeEndsEndsForTheCaller() throws {
        let w = try TestWorld()
        try w.bundle("e.base")
        try w.bundle("e.user", deps: [Dep("e.base")], library: try SandboxTests.hostileLibrary())
        let sv = try RunningSupervisor(w)
        func answers() throws -> [Int] { try sv.call("e.user", "floodAnswers", as: [Int].self) }
        #expect(try sv.call("e.user", "callEcho", #"{"path":"e.base"}"#, as: Bool.self))
        try sv.waitUntil("the first call answered") { try answers() == [1, 0] }
        try waitForLink(sv, from: "e.user", to: "e.base")
        // A header of 2 GiB on its end of the link: e.base's worker ends the link. The supervisor
        // holds a duplicate of e.base's end (the witness of its mark): without a shutdown, e.user
        // would read nothing, and its next call would wait out its 20 s in the dead link.
        #expect(try sv.call("e.user", "breakLinks", as: Int.self) == 1)
        try sv.waitUntil("the ended link forgotten") { try sv.plugin("e.user").links == nil }
        #expect(try sv.call("e.user", "callEcho", #"{"path":"e.base"}"#, as: Bool.self))
        try sv.waitUntil(timeout: 5, "the next call answered") { try answers() == [2, 0] }
        #expect(try sv.plugin("e.base").restarts == 0 && sv.plugin("e.user").restarts == 0)
    }

    @Test("four callers through a linked plugin lose no call while the callee is restarted and reloaded (the links are drained first)")
    func drainsLinks() throws {
        let w = try TestWorld()
        let bundle = try w.bundle("z.base")
        try w.bundle("z.user", deps: [Dep("z.base")])
        let sv = try RunningSupervisor(w)
        let callers = ZeroDropTests.Callers(socket: sv.socket, target: "z.base", via: "z.user", count: 4)
        try sv.waitUntil("calls flowing") { callers.tally.seen.ok > 50 }
        try waitForLink(sv, from: "z.user", to: "z.base")
        for i in 1...3 {
            let pid = try sv.plugin("z.base").pid
            let r = try sv.cli("restart", "z.base")
            #expect(r.code == 0, "restart \(i): \(r.err)")
            #expect(try sv.plugin("z.base").pid != pid)
            try callers.waitForMore(sv, "calls after restart \(i)")
            try waitForLink(sv, from: "z.user", to: "z.base")
        }
        var manifest = try String(contentsOfFile: bundle + "/plugin.json", encoding: .utf8)
        manifest = manifest.replacingOccurrences(of: "\"1.0.0\"", with: "\"1.0.1\"")
        try manifest.write(toFile: bundle + "/plugin.json", atomically: true, encoding: .utf8)
        #expect(try sv.cli("reload").code == 0)
        try callers.waitForMore(sv, "calls after the reload")
        try callers.stopExpectingNoFailure(sv)
        #expect(try sv.plugin("z.user").restarts == 0)
    }

    @Test("an inline method (`execution: .inline`, no thread hops) calls another plugin as a task's method does, over a link and through the supervisor: results, errors, trace, the callee's timeout, 64 at once, a timer's resumption")
    func inlineMethods() throws {
        for links in [true, false] {
            let w = try TestWorld()
            try w.bundle("i.base", extra: ["limits": ["callTimeoutMs": 400]])
            try w.bundle("i.user", deps: [Dep("i.base")])
            let config = w.root + "/config.json"
            try #"{"peerLinks": \#(links)}"#.write(toFile: config, atomically: true, encoding: .utf8)
            let sv = try RunningSupervisor(w, args: ["--config", config])
            func inline(_ method: String, _ params: String = "null", traceparent: String? = nil) throws -> Shell.Result {
                var args = ["call", "i.user", "callInline", #"{"target":"i.base","method":"\#(method)","params":\#(params)}"#]
                if let traceparent { args += ["--traceparent", traceparent] }
                return try sv.cli(args)
            }
            let first = try inline("echo", #"{"x":1}"#)
            #expect(first.code == 0 && first.out.contains(#""x":1"#), "\(first.out)\(first.err)")
            if links { try waitForLink(sv, from: "i.user", to: "i.base") }
            #expect(try sv.plugin("i.user").links == (links ? ["i.base"] : nil))
            for i in 0..<3 {
                let r = try inline("echo", "[\(i)]")
                #expect(r.code == 0 && r.out.contains("[\(i)]"), "\(r.out)\(r.err)")
            }
            let failed = try inline("fail")
            #expect(failed.code != 0 && failed.err.contains("custom: failed on purpose"), "\(failed.err)")
            let trace = "4bf92f3577b34da6a3ce929d0e0e4736"
            let seen = try inline("traceparent", traceparent: "00-\(trace)-00f067aa0ba902b7-01")
            let parts = try JSONDecoder().decode(String.self, from: Data(seen.out.utf8)).split(separator: "-")
            #expect(parts.count == 4 && parts[1] == trace && parts[2] != "00f067aa0ba902b7", "\(seen.out)\(seen.err)")
            let slow = try inline("sleep", #"{"ms":5000}"#)
            #expect(slow.code != 0 && slow.err.contains("timeout:") && slow.err.contains("i.base"), "\(slow.err)")

            // 64 at once on one connection (most run on the global executor: inline only while alone).
            let conn = try rawControl(sv.socket)
            defer { conn.close() }
            for id in 1...64 {
                try conn.sendFrame(callFrame(id: UInt64(id), target: "i.user", method: "callInline",
                                             params: #"{"target":"i.base","method":"echo","params":[\#(id)]}"#))
            }
            var answered = Set<UInt64>()
            for _ in 1...64 {
                let frame = try #require(try conn.receiveFrame())
                try frame.withUnsafeBytes { bytes in
                    let env = try Envelope.parse(bytes)
                    let id = try #require(env.id)
                    let result = env.result.map { String(decoding: bytes[$0], as: UTF8.self) }
                    #expect(env.error == nil && result == "[\(id)]", "\(String(decoding: bytes, as: UTF8.self))")
                    answered.insert(id)
                }
            }
            #expect(answered == Set(1...64))
            // Resumed by a timer, not by a delivery.
            let timed = try sv.cli("call", "i.user", "sleepInline", #"{"ms":30}"#)
            #expect(timed.code == 0 && timed.out.contains("30"), "\(timed.out)\(timed.err)")
            // Alone, it starts on the thread that delivered the call (the I/O thread, where a sync
            // method runs); through the supervisor the reply comes to that thread too, and it ends
            // there (over a link, on the links thread).
            let io = try JSONDecoder().decode(String.self, from: Data(sv.cli("call", "i.user", "thread").out.utf8))
            let threads = try JSONDecoder().decode([String].self, from: Data(sv.cli("call", "i.user", "threadsInline", #""i.base""#).out.utf8))
            #expect(threads.count == 2 && threads[0] == io && (links ? threads[1] != io : threads[1] == io), "I/O thread \(io), inline method \(threads)")
            #expect(try sv.plugin("i.user").restarts == 0)
        }
    }

    @Test("peerLinks: false in the config: every call goes through the supervisor")
    func switchedOff() throws {
        let w = try TestWorld()
        try w.bundle("o.base")
        try w.bundle("o.user", deps: [Dep("o.base")])
        let config = w.root + "/config.json"
        try #"{"peerLinks": false}"#.write(toFile: config, atomically: true, encoding: .utf8)
        let sv = try RunningSupervisor(w, args: ["--config", config])
        for i in 0..<3 { #expect(try nested(sv, "o.user", "o.base", "echo", "[\(i)]").out.contains("[\(i)]")) }
        #expect(try sv.plugin("o.user").links == nil)
    }
}
