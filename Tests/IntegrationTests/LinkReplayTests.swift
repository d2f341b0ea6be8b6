import Foundation
import IPC
import PluginProtocol
import Protocol
import SupervisorClient
import Testing

/// SPEC §15 over a program's direct link (docs/protocol.md "Calls that survive a crash"): the calls
/// in flight on a link whose worker dies go back to their callers, who send them through the
/// supervisor naming where they were (`afterLink`); the supervisor read the worker's mark for the
/// link before the caller could see the link end, and replays what its plugin never had, retries
/// what is idempotent, and fails the rest with `started: true`. Real workers, killed with SIGKILL,
/// a `SupervisorClient` whose calls go over its direct link.
@Suite(.serialized, .timeLimit(.minutes(4)))
struct LinkReplayTests {
    /// A client of `sv` whose calls to `id` go over a direct link (its first went through the supervisor).
    static func linkedClient(_ sv: RunningSupervisor, to id: String) async throws -> SupervisorClient {
        let client = try await SupervisorClient.connect(socket: sv.socket)
        try await waitForLink(client, to: id)
        return client
    }

    /// Calls `ran` until the client's calls to `id` go over a link again (after a restart the next
    /// call goes through the supervisor, and a link follows it).
    static func waitForLink(_ client: SupervisorClient, to id: String) async throws {
        try await waitUntil("a direct link to \(id)") {
            _ = try await client.call(id, "ran", as: [Int].self)
            return client.linkedPlugins.contains(id)
        }
    }

    @Test("over a direct link: a worker killed while 16 calls wait behind a slow one: each waiting call is answered by the next worker, once; the slow one fails with started: true")
    func waitingCallsOverALink() async throws {
        let w = try TestWorld()
        try w.bundle("l.serial")
        let sv = try RunningSupervisor(w)
        let client = try await Self.linkedClient(sv, to: "l.serial")
        defer { client.close() }
        // `block` runs on the thread that delivers the link's calls: those behind it stay unread.
        let slow = Task { try await client.call("l.serial", "block", ["ms": 60_000], as: Int.self) }
        try sv.waitUntil("the slow call to start") { FileManager.default.fileExists(atPath: w.home + "/data/l.serial/blocking") }
        let waiting = (0..<16).map { i in Task { try await client.call("l.serial", "tally", i, as: Int.self) } }
        try sv.waitUntil("17 calls in flight over the link") { client.linkCallsInFlight(to: "l.serial") == 17 }
        let pid = try #require(try sv.plugin("l.serial").pid)
        kill(pid, SIGKILL)
        await #expect { _ = try await slow.value } throws: { error in
            let body = error as? ErrorBody
            return body?.code == "unavailable" && body?.started == true
        }
        for (i, call) in waiting.enumerated() {
            #expect(try await call.value == i)
        }
        // Each ran once (their tasks sent them on each by itself: in any order).
        let ran = try await client.call("l.serial", "ran", as: [Int].self)
        #expect(ran.sorted() == Array(0..<16), "\(ran)")
        #expect(try sv.plugin("l.serial").restarts == 1)
        let metrics = try Prometheus(sv.cli("metrics").out)
        #expect(metrics["plugin_calls_replayed_total", ["plugin": "l.serial"]] == 16)
        #expect(metrics["plugin_calls_retried_total", ["plugin": "l.serial"]] == nil)
    }

    @Test("calls taken off a direct link while a call through the supervisor holds the plugin, and the other way round: the worker killed, each call its plugin never had is replayed, none counted as started")
    func aCallTakenOffItsSocketIsNotStarted() async throws {
        let w = try TestWorld()
        try w.bundle("l.both")
        // The worker is killed by the test, not by its watchdog while the slow call holds it (the
        // callers' tasks may be slow to start on a busy machine).
        let sv = try RunningSupervisor(w, args: ["--config", try w.config(#"{"pingTimeoutMs": 60000}"#)])
        let client = try await Self.linkedClient(sv, to: "l.both")
        defer { client.close() }
        for slowOverTheLink in [false, true] {
            // The slow call holds the plugin from one thread (the worker's I/O thread, or its links
            // thread); the other thread takes the next call off its own socket and waits for the plugin.
            let raw = try rawControl(sv.socket)
            defer { raw.close() }
            let slowTask: Task<Int, any Error>? = slowOverTheLink ? Task { try await client.call("l.both", "block", ["ms": 60_000], as: Int.self) } : nil
            if !slowOverTheLink { try raw.sendFrame(callFrame(id: 1, target: "l.both", method: "block", params: #"{"ms":60000}"#)) }
            // (The plugin's data folder outlives its workers: the second slow call is the second line.)
            try sv.waitUntil("the slow call to start") {
                ((try? String(contentsOfFile: w.home + "/data/l.both/blocking", encoding: .utf8)) ?? "").split(separator: "\n").count == (slowOverTheLink ? 2 : 1)
            }
            var waiting: [Task<Int, any Error>] = []
            if slowOverTheLink {
                for i in 0..<4 { try raw.sendFrame(callFrame(id: UInt64(100 + i), target: "l.both", method: "tally", params: "\(i)")) }
                #expect(try CrashReplayTests.routed(raw).isEmpty, "answered before the kill")
            } else {
                waiting = (0..<4).map { i in Task { try await client.call("l.both", "tally", i, as: Int.self) } }
                try sv.waitUntil("4 calls in flight over the link") { client.linkCallsInFlight(to: "l.both") == 4 }
            }
            _ = try CrashReplayTests.killWorker(sv, "l.both")
            if let slowTask { await #expect(throws: ErrorBody.self) { _ = try await slowTask.value } }
            for (i, call) in waiting.enumerated() { #expect(try await call.value == i, "call \(i) over the link") }
            var answers: [UInt64: CrashReplayTests.Answer] = [:]
            while answers.count < (slowOverTheLink ? 4 : 1) {
                let answer = try CrashReplayTests.read(raw)
                answers[answer.id] = answer
            }
            if slowOverTheLink {
                for i in 0..<4 { #expect(answers[UInt64(100 + i)]?.result == "\(i)", "call \(i) through the supervisor: \(String(describing: answers[UInt64(100 + i)]))") }
            } else {
                #expect(answers[1]?.error?.started == true)
            }
            // Each ran once (the plugin's record of them goes on across its workers).
            let ran = try await client.call("l.both", "ran", as: [Int].self)
            #expect(ran.count == (slowOverTheLink ? 8 : 4) && ran.suffix(4).sorted() == Array(0..<4), "\(ran)")
            try await Self.waitForLink(client, to: "l.both")
        }
    }

    @Test("over a direct link, 4 callers, the worker killed 10 times or more (until a kill catches a call on the link): an idempotent method loses no call; one that is not fails only calls its plugin had started, each with started: true, and none runs twice")
    func killsUnderLoad() async throws {
        let w = try TestWorld()
        try w.bundle("l.idem", extra: ["idempotent": ["echo"]])
        try w.bundle("l.once")
        let cfg = try w.config(#"{"restartLimit": 1000000, "restartBackoffBaseMs": 1, "restartBackoffMaxMs": 5}"#)
        let sv = try RunningSupervisor(w, args: ["--config", cfg])
        let client = try await Self.linkedClient(sv, to: "l.idem")
        defer { client.close() }
        try await Self.waitForLink(client, to: "l.once")
        let seen = Guarded(Load())
        let callers = (0..<4).map { lane in
            Task {
                var n = 0
                while !seen.withLock({ $0.stop }) {
                    n += 1
                    do {
                        let echoed = try await client.call("l.idem", "echo", [n], as: [Int].self)
                        seen.withLock { if echoed == [n] { $0.ok += 1 } else { $0.other.append("echo \(n): \(echoed)") } }
                    } catch {
                        seen.withLock { $0.other.append("echo \(n): \(error)") }
                    }
                    let value = lane * 1_000_000 + n
                    do {
                        let tallied = try await client.call("l.once", "tally", value, as: Int.self)
                        seen.withLock { $0.tallied.append(tallied) }
                    } catch let error as ErrorBody where error.code == "unavailable" && error.started {
                        seen.withLock { $0.startedFailures += 1 }
                    } catch {
                        seen.withLock { $0.other.append("tally \(value): \(error)") }
                    }
                }
            }
        }
        var linkedKills = 0
        // Ten kills, and more (up to 40) until one has caught a call on its link: the calls are
        // quick, and a kill may land between two of them.
        func caught() throws -> Bool {
            let metrics = try Prometheus(sv.cli("metrics").out)
            return ["l.idem", "l.once"].contains { id in
                (metrics["plugin_calls_replayed_total", ["plugin": id]] ?? 0) + (metrics["plugin_calls_retried_total", ["plugin": id]] ?? 0) > 0
            }
        }
        for round in 0..<40 {
            if round >= 10, try caught() { break }
            let id = round % 2 == 0 ? "l.idem" : "l.once"
            // Killed while its calls go over the link.
            try await Self.waitForLink(client, to: id)
            if client.linkCallsInFlight(to: id) > 0 { linkedKills += 1 }
            _ = try CrashReplayTests.killWorker(sv, id)
        }
        let (result, resent) = try await Self.finish(seen, callers, sv, idempotent: "l.idem", once: "l.once")
        print("over a direct link: \(linkedKills) kills with calls on the link, \(result.ok) echoes, \(result.tallied.count) tallies, "
              + "\(result.startedFailures) failed as started, \(resent) replayed or retried")
        #expect(resent > 0, "no kill caught a call on a link")
    }
}

extension LinkReplayTests {
    /// What the callers of a load test under kills saw: each caller calls an idempotent `echo`,
    /// then a `tally` that is not.
    struct Load {
        var ok = 0
        var tallied: [Int] = []
        var startedFailures = 0
        var other: [String] = []
        var stop = false
    }

    /// Once calls flow after the last kill: stops the callers and checks what they saw (no
    /// failure but a started `tally`; none ran twice; each tallied value ran); what was replayed
    /// or retried, counted by the supervisor.
    static func finish(_ seen: Guarded<Load>, _ callers: [Task<Void, Never>], _ sv: RunningSupervisor, idempotent: String,
                       once: String) async throws -> (Load, Int) {
        let before = seen.withLock { $0.ok }
        try await waitUntil("calls to flow after the last kill") { seen.withLock { $0.ok } > before + 50 }
        seen.withLock { $0.stop = true }
        for caller in callers { await caller.value }
        let result = seen.withLock { $0 }
        #expect(result.other.isEmpty, "\(result.other.count) unexpected: \(result.other.prefix(3))")
        let ran = try CrashReplayTests.ran(sv, once)
        #expect(Set(ran).count == ran.count, "ran twice: \(Dictionary(grouping: ran, by: { $0 }).filter { $0.value.count > 1 }.keys.prefix(5))")
        #expect(Set(result.tallied).isSubset(of: Set(ran)))
        let metrics = try Prometheus(sv.cli("metrics").out)
        let resent = [idempotent, once].reduce(0.0) { sum, id in
            sum + (metrics["plugin_calls_replayed_total", ["plugin": id]] ?? 0) + (metrics["plugin_calls_retried_total", ["plugin": id]] ?? 0)
        }
        return (result, Int(resent))
    }

    @Test("a client's linkCalls report for a link the supervisor settled at its worker's death (the report was on its way) is counted, and the client stays connected",
          arguments: [false, true])
    func reportAfterItsLinkEnded(_ acrossAnUpgrade: Bool) async throws {
        let w = try TestWorld()
        try w.bundle("l.r")
        let sv = try RunningSupervisor(w)
        let control = try rawControl(sv.socket)
        defer { control.close() }
        let link = try ClientTests().rawLink(control, to: "l.r")
        defer { link.close() }
        if acrossAnUpgrade {
            // The link the client held before the supervisor exec'd itself counts as held after it.
            let upgrader = try await SupervisorClient.connect(socket: sv.socket)
            defer { upgrader.close() }
            #expect(try await upgrader.upgrade().workers == 1)
        }
        _ = try CrashReplayTests.killWorker(sv, "l.r")
        try control.sendFrame(ProtocolJSON.frame(CallHop.LinkCalls(target: "l.r", calls: CallHop.Tally())))
        try control.sendFrame(callFrame(id: 7, target: "l.r", method: "ping"))
        let answer = String(decoding: try #require(try control.receiveFrame()), as: UTF8.self)
        #expect(answer.contains(#""id":7"#) && answer.contains(#""result":1"#), "\(answer)")
        #expect(!sv.log.contains("dropping control client"), "\(sv.log)")
    }

    @Test("afterLink from the wrong peer or the wrong moment: malformed is refused naming it; a link this connection never held, or one whose worker lives, counts as started (a call that is not idempotent fails with started and never runs; an idempotent one is retried)")
    func hostileAfterLink() throws {
        let w = try TestWorld()
        try w.bundle("l.plain")
        try w.bundle("l.safe", extra: ["idempotent": ["echo"]])
        let sv = try RunningSupervisor(w)
        let connection = try rawControl(sv.socket)
        defer { connection.close() }
        func call(_ id: UInt64, _ target: String, _ method: String, _ params: String, afterLink: String) throws -> CrashReplayTests.Answer {
            let body = #"{"type":"call","id":\#(id),"target":"\#(target)","method":"\#(method)","params":\#(params),"afterLink":\#(afterLink)}"#
            try connection.sendFrame([UInt8].frame(body: Array(body.utf8)))
            return try CrashReplayTests.read(connection)
        }
        for (i, junk) in [#""junk""#, #"{"link":1}"#, #"{"link":-1,"id":2}"#, "[1,2]"].enumerated() {
            let answer = try call(UInt64(1 + i), "l.plain", "tally", "1", afterLink: junk)
            #expect(answer.error?.code == "badRequest" && answer.error?.message.contains("afterLink must be") == true, "\(junk): \(answer)")
        }
        // No link this connection held (another's number, or none): the call may have started.
        let never = try call(10, "l.plain", "tally", "7", afterLink: #"{"link":424242,"id":1}"#)
        #expect(never.error?.code == "unavailable" && never.error?.started == true, "\(never)")
        let retried = try call(11, "l.safe", "echo", "[7]", afterLink: #"{"link":424242,"id":1}"#)
        #expect(retried.error == nil && retried.result == "[7]", "\(retried)")
        // Nothing ran twice, nor at all, from those: tally ran nothing.
        #expect(try CrashReplayTests.ran(sv, "l.plain").isEmpty)
        #expect(try sv.plugin("l.plain").state == "running" && sv.plugin("l.plain").restarts == 0)
    }
}
