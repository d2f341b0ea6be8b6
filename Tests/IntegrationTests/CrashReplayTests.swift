import Foundation
import IPC
import PluginProtocol
import Protocol
import SupervisorClient
import Testing

/// SPEC §15: calls that survive a crash. What a killed worker's plugin never started goes to the
/// next worker in its order, once; a started call of an idempotent method is sent again; any other
/// started call fails with `"started": true`; nothing else runs twice. Real workers, killed with
/// SIGKILL (nothing of theirs runs at the end), calls through the supervisor.
@Suite(.serialized, .timeLimit(.minutes(5)))
struct CrashReplayTests {
    /// One answer on a raw control connection.
    struct Answer {
        var id: UInt64
        var result: String?
        var error: ErrorBody?
    }

    static func read(_ connection: BlockingConnection) throws -> Answer {
        let frame = try #require(try connection.receiveFrame(), "the supervisor closed the connection")
        return try frame.withUnsafeBytes { bytes in
            let env = try Envelope.parse(bytes)
            let error = try env.error.map { try ProtocolJSON.decode(ErrorBody.self, from: UnsafeRawBufferPointer(rebasing: bytes[$0])) }
            return Answer(id: env.id ?? 0, result: env.result.map { String(decoding: bytes[$0], as: UTF8.self) }, error: error)
        }
    }

    /// Sends `status` on `connection` and reads answers until its own: the supervisor reads one
    /// connection's frames in order, so every call sent before it has been routed by then.
    /// Returns the answers that came first.
    static func routed(_ connection: BlockingConnection, id: UInt64 = 999_999) throws -> [Answer] {
        var status = FrameBuilder(kind: .status)
        status.uint("id", id)
        try connection.sendFrame(status.finish())
        var before: [Answer] = []
        while true {
            let answer = try read(connection)
            if answer.id == id { return before }
            before.append(answer)
        }
    }

    static func ran(_ sv: RunningSupervisor, _ id: String) throws -> [Int] { try sv.call(id, "ran", as: [Int].self) }

    /// On a new control connection: `block` (id 1) running in `id`'s worker, then `count` calls of
    /// `tally` (ids 100...) routed to that worker behind it, unanswered.
    static func slowCallThenWaiting(_ count: Int, in id: String, _ w: TestWorld, _ sv: RunningSupervisor) throws -> BlockingConnection {
        let connection = try rawControl(sv.socket)
        try connection.sendFrame(callFrame(id: 1, target: id, method: "block", params: #"{"ms":20000}"#))
        try sv.waitUntil("the slow call to start") { FileManager.default.fileExists(atPath: w.home + "/data/\(id)/blocking") }
        for i in 0..<count { try connection.sendFrame(callFrame(id: UInt64(100 + i), target: id, method: "tally", params: "\(i)")) }
        #expect(try routed(connection).isEmpty, "answered before the kill")
        return connection
    }

    /// Kills `id`'s worker with SIGKILL and waits until the next one runs; returns the new pid.
    @discardableResult
    static func killWorker(_ sv: RunningSupervisor, _ id: String) throws -> Int32 {
        let pid = try #require(try sv.plugin(id).pid)
        kill(pid, SIGKILL)
        return try sv.waitFor(timeout: 15, "\(id) running again after its worker \(pid) was killed") {
            let p = try sv.plugin(id)
            return p.state == "running" && p.pid != pid ? p.pid : nil
        }
    }

    @Test("a worker killed while 64 calls wait behind a slow one: each waiting call is answered by the next worker, in order, none twice; the slow one fails with started: true")
    func waitingCallsGoToTheNextWorker() throws {
        let w = try TestWorld()
        try w.bundle("r.serial")
        let sv = try RunningSupervisor(w)
        // `supervisor events` says how many went on, in text as in JSON.
        let text = w.root + "/events.txt"
        let follower = try ClientTests.follow(sv, [], to: text)
        defer { follower.terminate() }
        try sv.waitUntil("the follower to listen") { try sv.cli("metrics").out.contains("supervisor_host_event_listeners 1") }
        try Self.expectWaitingCallsReplayed(in: "r.serial", w, sv)
        try sv.waitUntil("the exit's line") {
            ((try? String(contentsOfFile: text, encoding: .utf8)) ?? "").split(separator: "\n").contains { $0.contains("exited") && $0.contains("64 replayed") }
        }
    }

    @Test("a worker that crashes while a restart drains it: the calls its plugin never started go to the worker the restart brings up, in order; removed by a reload instead, they fail with why, not as started")
    func aCrashDuringARestartsDrain() throws {
        let w = try TestWorld()
        let bundle = try w.bundle("r.serial")
        let sv = try RunningSupervisor(w, args: ["--config", try w.config(#"{"drainTimeoutMs": 20000}"#)])
        for ending in ["restart", "reload"] {
            let connection = try Self.slowCallThenWaiting(16, in: "r.serial", w, sv)
            defer { connection.close() }
            let pid = try #require(try sv.plugin("r.serial").pid)
            let asker = try rawControl(sv.socket)
            defer { asker.close() }
            if ending == "reload" { try FileManager.default.moveItem(atPath: bundle, toPath: w.root + "/removed") }
            try asker.sendFrame(framed(#"{"type":"\#(ending)","id":7,"target":"r.serial"}"#))
            try sv.waitUntil("the \(ending)'s drain to wait for the calls inside") {
                sv.log.components(separatedBy: "r.serial: waiting for").count == (ending == "restart" ? 2 : 3)
            }
            kill(pid, SIGKILL)
            var answers: [UInt64: Answer] = [:]
            var order: [UInt64] = []
            while answers.count < 17 {
                let answer = try Self.read(connection)
                #expect(answers[answer.id] == nil, "answered twice: \(answer.id)")
                answers[answer.id] = answer
                order.append(answer.id)
            }
            #expect(answers[1]?.error?.started == true, "\(String(describing: answers[1]))")
            let done = try Self.read(asker)
            if ending == "restart" {
                #expect(done.error == nil, "\(String(describing: done.error))")
                for i in 0..<16 {
                    let answer = try #require(answers[UInt64(100 + i)])
                    #expect(answer.result == "\(i)" && answer.error == nil, "call \(i): \(String(describing: answer.error))")
                }
                #expect(order.filter { $0 >= 100 } == (100..<116).map { UInt64($0) }, "answered out of order")
                #expect(try Self.ran(sv, "r.serial") == Array(0..<16))
                #expect(try sv.plugin("r.serial").pid != pid)
            } else {
                for i in 0..<16 {
                    let error = try #require(answers[UInt64(100 + i)]?.error, "call \(i) answered")
                    #expect(error.code == "unavailable" && error.started != true && error.message.contains("removed"), "call \(i): \(error)")
                }
            }
        }
    }

    @Test("a stream call waiting behind a slow one, its worker killed: the next worker streams it whole (its plugin never started it); a call with an input stream is not sent again")
    func aStreamNeverStartedGoesToTheNextWorker() throws {
        let w = try TestWorld()
        try w.bundle("r.serial")
        let sv = try RunningSupervisor(w)
        let connection = try Self.slowCallThenWaiting(0, in: "r.serial", w, sv)
        defer { connection.close() }
        try connection.sendFrame(framed(#"{"type":"call","id":50,"target":"r.serial","method":"rows","params":{"count":5},"stream":true}"#))
        try connection.sendFrame(framed(#"{"type":"call","id":60,"target":"r.serial","method":"sum","params":{},"input":true,"stream":true}"#))
        #expect(try Self.routed(connection).isEmpty, "answered before the kill")
        try Self.killWorker(sv, "r.serial")
        var chunks: [UInt64] = []
        var replies: [UInt64: String] = [:]
        while replies.count < 3 {
            let frame = try #require(try connection.receiveFrame())
            let (kind, id, seq) = try frame.withUnsafeBytes { let e = try Envelope.parse($0); return (e.kind, e.id, e.seq) }
            if kind == .chunk, id == 50 { chunks.append(seq ?? 99) } else if let id { replies[id] = String(decoding: frame, as: UTF8.self) }
        }
        #expect(chunks == [0, 1, 2, 3, 4], "\(chunks)")
        #expect(replies[50]?.contains("error") == false, "\(replies[50] ?? "")")
        #expect(replies[60]?.contains("a call with an input stream is not sent again") == true, "\(replies[60] ?? "")")
        #expect(replies[1]?.contains(#""started":true"#) == true, "\(replies[1] ?? "")")
    }

    @Test("the same after an upgrade in place: the worker the new binary took over sent its taken page again, so its waiting calls are replayed on its crash, not failed as started")
    func waitingCallsAcrossAnUpgrade() async throws {
        let w = try TestWorld()
        try w.bundle("r.serial")
        let sv = try RunningSupervisor(w)
        let pid = try sv.plugin("r.serial").pid
        let client = try await SupervisorClient.connect(socket: sv.socket)
        defer { client.close() }
        #expect(try await client.upgrade().workers == 1)
        #expect(try sv.plugin("r.serial").pid == pid, "the worker was taken over, not restarted")
        // Answered after the page was asked for (the worker answers in order).
        #expect(try sv.call("r.serial", "ran", as: [Int].self).isEmpty)
        try Self.expectWaitingCallsReplayed(in: "r.serial", w, sv)
        #expect(!sv.log.contains("did not give its taken page back"), "\(sv.log)")
    }

    /// `slowCallThenWaiting(64)` in `id`, its worker killed: each waiting call answered by the next
    /// worker, in order, none twice; the slow one failed with started: true. `restarts`: its
    /// restarts before.
    static func expectWaitingCallsReplayed(in id: String, _ w: TestWorld, _ sv: RunningSupervisor, restarts: Int = 0) throws {
        let connection = try Self.slowCallThenWaiting(64, in: id, w, sv)
        defer { connection.close() }
        let pid = try #require(try sv.plugin(id).pid)
        kill(pid, SIGKILL)
        var answers: [UInt64: Answer] = [:]
        var order: [UInt64] = []
        while answers.count < 65 {
            let answer = try Self.read(connection)
            #expect(answers[answer.id] == nil, "answered twice: \(answer.id)")
            answers[answer.id] = answer
            order.append(answer.id)
        }
        let slow = try #require(answers[1])
        #expect(slow.error?.code == "unavailable" && slow.error?.started == true, "\(String(describing: slow.error))")
        for i in 0..<64 {
            let answer = try #require(answers[UInt64(100 + i)])
            #expect(answer.result == "\(i)" && answer.error == nil, "call \(i): \(String(describing: answer.error))")
        }
        #expect(order.filter { $0 >= 100 } == (100..<164).map { UInt64($0) }, "answered out of order")
        #expect(try Self.ran(sv, id) == Array(0..<64))
        let p = try sv.plugin(id)
        #expect(p.restarts == restarts + 1 && p.pid != pid)
        try sv.waitUntil("the log line") { sv.log.contains("64 go to the next worker (not started)") }
        let metrics = try Prometheus(sv.cli("metrics").out)
        #expect(metrics["plugin_calls_replayed_total", ["plugin": id]] == 64)
        #expect(metrics["plugin_calls_retried_total", ["plugin": id]] == nil)
    }

    @Test("an idempotent method under 100 kills of its worker with 4 callers: no call fails")
    func idempotentSurvivesKills() throws {
        let kills = Int(ProcessInfo.processInfo.environment["REPLAY_KILLS"] ?? "") ?? 100
        let w = try TestWorld()
        try w.bundle("r.idem", extra: ["idempotent": ["echo"]])
        let cfg = try w.config(#"{"restartLimit": 1000000, "restartBackoffBaseMs": 1, "restartBackoffMaxMs": 5}"#)
        let sv = try RunningSupervisor(w, args: ["--config", cfg])
        let tally = Tally()
        // Stopped however the test ends: a caller left running would keep its supervisor busy.
        defer { tally.finish() }
        let callers = (0..<4).map { _ in echoCaller(sv.socket, "r.idem", unavailableAllowed: false, tally) }
        callers.forEach { $0.start() }
        try sv.waitUntil("calls to flow") { tally.seen.ok > 100 }
        for _ in 0..<kills { try Self.killWorker(sv, "r.idem") }
        let before = tally.seen.ok
        try sv.waitUntil("calls to flow after the last kill") { tally.seen.ok > before + 100 }
        tally.finish()
        try sv.waitUntil("the callers to finish") { callers.allSatisfy(\.isFinished) }
        let seen = tally.seen
        #expect(seen.failures.isEmpty, "\(seen.failures.count) failed: \(seen.failures.prefix(3))")
        #expect(try sv.plugin("r.idem").restarts == kills)
        let metrics = try Prometheus(sv.cli("metrics").out)
        let replayed = metrics["plugin_calls_replayed_total", ["plugin": "r.idem"]] ?? 0
        let retried = metrics["plugin_calls_retried_total", ["plugin": "r.idem"]] ?? 0
        print("idempotent: \(kills) kills, \(seen.ok) calls answered, none failed; \(Int(replayed)) replayed, \(Int(retried)) retried")
        #expect(replayed + retried > 0, "no kill caught a call inside the worker")
    }

    @Test("a method that is not idempotent, its worker killed 20 times under 4 callers: only calls its plugin had started fail, each with started: true, and none ran twice")
    func startedCallsFailTheRestRunOnce() throws {
        let w = try TestWorld()
        try w.bundle("r.once")
        let cfg = try w.config(#"{"restartLimit": 1000000, "restartBackoffBaseMs": 1, "restartBackoffMaxMs": 5}"#)
        let sv = try RunningSupervisor(w, args: ["--config", cfg])
        final class Seen: @unchecked Sendable {
            let lock = NSLock()
            var ok: [Int] = []
            var failed: [(Int, ErrorBody)] = []
            var other: [String] = []
            var stop = false
        }
        let seen = Seen()
        defer { seen.lock.withLock { seen.stop = true } }
        let socket = sv.socket
        let callers = (0..<4).map { lane in
            Thread {
                guard let connection = try? rawControl(socket) else { return seen.lock.withLock { seen.other.append("cannot connect") } }
                defer { connection.close() }
                var n = 0
                while !seen.lock.withLock({ seen.stop }) {
                    n += 1
                    let value = lane * 1_000_000 + n
                    do {
                        try connection.sendFrame(callFrame(id: UInt64(n), target: "r.once", method: "tally", params: "\(value)"))
                        let answer = try Self.read(connection)
                        seen.lock.withLock {
                            if answer.result == "\(value)" { seen.ok.append(value) }
                            else if let error = answer.error { seen.failed.append((value, error)) }
                            else { seen.other.append("\(answer)") }
                        }
                    } catch {
                        return seen.lock.withLock { seen.other.append("\(error)") }
                    }
                }
            }
        }
        callers.forEach { $0.start() }
        try sv.waitUntil("calls to flow") { seen.lock.withLock { seen.ok.count } > 100 }
        for _ in 0..<20 { try Self.killWorker(sv, "r.once") }
        let before = seen.lock.withLock { seen.ok.count }
        try sv.waitUntil("calls to flow after the last kill") { seen.lock.withLock { seen.ok.count } > before + 100 }
        seen.lock.withLock { seen.stop = true }
        try sv.waitUntil("the callers to finish") { callers.allSatisfy(\.isFinished) }
        let ran = try Self.ran(sv, "r.once")
        let (ok, failed, other) = seen.lock.withLock { (seen.ok, seen.failed, seen.other) }
        #expect(other.isEmpty, "\(other.prefix(3))")
        #expect(Set(ran).count == ran.count, "ran twice: \(Dictionary(grouping: ran, by: { $0 }).filter { $0.value.count > 1 }.keys.prefix(5))")
        let ranSet = Set(ran)
        #expect(ok.allSatisfy(ranSet.contains), "answered but never ran")
        for (value, error) in failed {
            #expect(error.code == "unavailable" && error.started, "\(value): \(error)")
        }
        // Each kill ends at most the calls its plugin had taken: one a caller, four at the most.
        #expect(failed.count <= 20 * 4, "\(failed.count) failed over 20 kills")
        let replayed = try Prometheus(sv.cli("metrics").out)["plugin_calls_replayed_total", ["plugin": "r.once"]] ?? 0
        print("not idempotent: 20 kills, \(ok.count) calls answered, \(failed.count) failed (all started), \(Int(replayed)) replayed, \(ran.count) ran")
    }

    @Test("a plugin whose worker is killed and that is not restarted (restart: never): every call it held fails at once, with why")
    func noNextWorker() throws {
        let w = try TestWorld()
        try w.bundle("r.never", extra: ["restart": "never"])
        let sv = try RunningSupervisor(w)
        let connection = try Self.slowCallThenWaiting(10, in: "r.never", w, sv)
        defer { connection.close() }
        let started = Date()
        kill(try #require(try sv.plugin("r.never").pid), SIGKILL)
        var answers: [UInt64: Answer] = [:]
        while answers.count < 11 {
            let answer = try Self.read(connection)
            answers[answer.id] = answer
        }
        #expect(Date().timeIntervalSince(started) < 5, "the calls waited for a worker that never comes")
        #expect(answers[1]?.error?.started == true)
        for i in 0..<10 {
            let error = try #require(answers[UInt64(100 + i)]?.error)
            #expect(error.code == "unavailable" && !error.started && error.message.contains("no worker follows it"), "\(error)")
        }
        #expect(try sv.plugin("r.never").state == "failed")
    }

    @Test("a poison call of an idempotent method that crashes every worker it reaches: the restart intensity limit ends it, and its caller hears of the crash loop")
    func poisonCall() throws {
        let w = try TestWorld()
        try w.bundle("r.poison", extra: ["idempotent": ["crash"], "limits": ["retries": 10]])
        let cfg = try w.config(#"{"restartLimit": 3, "restartWindowSeconds": 60, "restartBackoffBaseMs": 1, "restartBackoffMaxMs": 5}"#)
        let sv = try RunningSupervisor(w, args: ["--config", cfg])
        let connection = try rawControl(sv.socket)
        defer { connection.close() }
        let started = Date()
        try connection.sendFrame(callFrame(id: 1, target: "r.poison", method: "crash", params: #"{"how":"segv"}"#, timeoutMs: 60_000))
        let answer = try Self.read(connection)
        #expect(Date().timeIntervalSince(started) < 20)
        let error = try #require(answer.error)
        #expect(error.code == "unavailable" && error.message.contains("restarted 3 times"), "\(error)")
        #expect(try sv.plugin("r.poison").state == "failed")
    }

    @Test("a method the plugin declares idempotent through the SDK (idempotent: true), not its manifest, is retried on the next worker")
    func declaredBySDK() throws {
        let w = try TestWorld()
        try w.bundle("r.flagged", extra: ["limits": ["retries": 10]])
        let cfg = try w.config(#"{"restartLimit": 2, "restartWindowSeconds": 60, "restartBackoffBaseMs": 1, "restartBackoffMaxMs": 5}"#)
        let sv = try RunningSupervisor(w, args: ["--config", cfg])
        let retried = try sv.cli("call", "r.flagged", "crashAgain")
        #expect(retried.code != 0 && retried.err.contains("restarted 2 times"), "retried until the intensity limit: \(retried.err)")
        #expect(try sv.cli("restart", "r.flagged").code == 0)
        let once = try sv.cli("call", "r.flagged", "crash", #"{"how":"segv"}"#)
        #expect(once.err.contains("crash is not idempotent") && once.err.contains("(started:"), "\(once.err)")
    }
}

extension CrashReplayTests {
    @Test("after an upgrade in place, a method the plugin declared idempotent through the SDK is still retried when the worker the new binary took over crashes")
    func declaredBySDKAcrossAnUpgrade() async throws {
        let w = try TestWorld()
        try w.bundle("r.flagged", extra: ["limits": ["retries": 10]])
        let cfg = try w.config(#"{"restartLimit": 2, "restartWindowSeconds": 60, "restartBackoffBaseMs": 1, "restartBackoffMaxMs": 5}"#)
        let sv = try RunningSupervisor(w, args: ["--config", cfg])
        let pid = try sv.plugin("r.flagged").pid
        let client = try await SupervisorClient.connect(socket: sv.socket)
        defer { client.close() }
        #expect(try await client.upgrade().workers == 1)
        #expect(try sv.plugin("r.flagged").pid == pid, "the worker was taken over, not restarted")
        let retried = try sv.cli("call", "r.flagged", "crashAgain")
        #expect(retried.code != 0 && retried.err.contains("restarted 2 times"), "retried until the intensity limit: \(retried.err)")
    }

    @Test("a worker that lies in its taken mark, lowering it or claiming calls it never got, cannot make the supervisor send a call that is not idempotent again: what it held fails as started",
          arguments: [("lowers", 0), ("raises", 1 << 62)])
    func aLyingWorker(_ lie: String, _ mark: Int) throws {
        let w = try TestWorld()
        try w.bundle("h.liar", library: try SandboxTests.hostileLibrary())
        // Unsandboxed: the liar reads /proc/self/maps to find its page.
        let cfg = try w.config(#"{"sandbox": false}"#)
        let sv = try RunningSupervisor(w, args: ["--config", cfg])
        let connection = try rawControl(sv.socket)
        defer { connection.close() }
        // Answered calls: the supervisor has seen the mark move up to them.
        for id in 1...3 {
            try connection.sendFrame(callFrame(id: UInt64(id), target: "h.liar", method: "getpid", params: #"{"number":0}"#))
            #expect(try Self.read(connection).error == nil)
        }
        try connection.sendFrame(callFrame(id: 10, target: "h.liar", method: "takenMarkThenBlock", params: #"{"number":\#(mark)}"#))
        for i in 0..<5 { try connection.sendFrame(callFrame(id: UInt64(20 + i), target: "h.liar", method: "getpid", params: #"{"number":0}"#)) }
        #expect(try Self.routed(connection).isEmpty)
        // The lie is in the page before the kill: the blocking call wrote it first, and said so.
        try sv.waitUntil("the lie to be written") { sv.log.contains("taken mark set to \(mark)") }
        kill(try #require(try sv.plugin("h.liar").pid), SIGKILL)
        var answers: [UInt64: Answer] = [:]
        while answers.count < 6 {
            let answer = try Self.read(connection)
            answers[answer.id] = answer
        }
        for id in [10, 20, 21, 22, 23, 24] {
            let error = try #require(answers[UInt64(id)]?.error, "\(lie): call \(id) was answered as if it ran")
            #expect(error.code == "unavailable" && error.started, "\(lie): call \(id): \(error)")
        }
        let replayed = try Prometheus(sv.cli("metrics").out)["plugin_calls_replayed_total", ["plugin": "h.liar"]]
        #expect(replayed == nil, "\(lie): \(replayed ?? 0) calls sent again on a liar's word")
        if mark == 0 { #expect(sv.log.contains("taken mark went back")) }
    }
}
