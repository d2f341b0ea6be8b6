import Foundation
import IPC
import PluginProtocol
import Testing

/// What the supervisor holds for one plugin is bounded: its calls in flight (`OutgoingCalls`), the
/// stream input held for a reader that grants no room (`HeldInput`), what its `hello` lists. A
/// plugin and a dependency that never answers would otherwise grow the supervisor's memory without
/// end; each limit answers the call that would pass it, and nothing else is touched.
@Suite(.serialized) struct HeldLimitsTests {
    static func hostile() throws -> String { try SandboxTests.hostileLibrary() }

    /// The next `count` frames the connections get, together (read in turns), within a minute.
    static func answers(_ connections: [BlockingConnection], count: Int) -> [String] {
        for connection in connections {
            var limit = timeval(tv_sec: 0, tv_usec: 100_000)
            setsockopt(connection.fd, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        }
        var texts: [String] = []
        let deadline = ContinuousClock.now + .seconds(60)
        while texts.count < count, ContinuousClock.now < deadline {
            for connection in connections where texts.count < count {
                if let frame = try? connection.receiveFrame() { texts.append(String(decoding: frame, as: UTF8.self)) }
            }
        }
        return texts
    }

    /// Two plugins of the hostile fixture, `caller` depending on `callee`, and a neighbour `h.fine`.
    static func pair(caller: String, callee: String) throws -> TestWorld {
        let w = try TestWorld()
        let lib = try hostile()
        try w.bundle(callee, library: lib)
        try w.bundle(caller, deps: [Dep(callee)], library: lib)
        try w.bundle("h.fine")
        return w
    }

    /// [answers, of which unavailable] to what `flooder` sent as raw frames.
    static func floodAnswers(_ sv: RunningSupervisor, _ flooder: String) throws -> [Int] {
        try sv.call(flooder, "floodAnswers", as: [Int].self)
    }

    @Test("a plugin may have 65,536 calls in flight through the supervisor: the next are refused unavailable, the callee got exactly those, the neighbour is served")
    func callsInFlight() throws {
        // An instrumented supervisor reads 70,000 calls too slowly for the wait: the rule is the
        // core's (OutgoingCallsTests).
        guard !Build.threadSanitized else { return }
        let w = try Self.pair(caller: "h.flood", callee: "h.sink")
        // Through the supervisor (over a peer link the calls would wait in the callee's worker,
        // in its memory, not the supervisor's).
        // The flooder's I/O thread sends from inside `receive` and answers no ping meanwhile: on a
        // slow machine a debug supervisor takes more than the 3 s ping timeout to read 70,000 calls.
        let sv = try RunningSupervisor(w, args: ["--config", try w.config(#"{"peerLinks": false, "pingTimeoutMs": 120000}"#)])
        let sent = 70_000
        _ = try sv.cli("call", "h.flood", "callFlood", #"{"path":"h.sink","number":\#(sent)}"#)
        try sv.waitUntil(timeout: 60, "the calls past the limit answered") {
            try Self.floodAnswers(sv, "h.flood") == [sent - 65_536, sent - 65_536]
        }
        try sv.waitUntil(timeout: 60, "the sink got the rest") { try sv.call("h.sink", "noReplies", as: Int.self) == 65_536 }
        #expect(try sv.call("h.fine", "echo", "1", as: Int.self) == 1)
        #expect(try sv.plugin("h.flood").state == "running")
        #expect(try sv.plugin("h.sink").state == "running")
    }

    @Test("input held for a reader that grants no room stops at 256 MiB for that plugin: each stream that would pass it fails unavailable, and the supervisor holds no more")
    func heldInput() throws {
        // As above: 640 MiB through an instrumented supervisor outlasts the wait (OutgoingCallsTests).
        guard !Build.threadSanitized else { return }
        let w = try Self.pair(caller: "h.pusher", callee: "h.slow")
        // As above: the pusher's I/O thread answers no ping while it sends.
        let sv = try RunningSupervisor(w, args: ["--config", try w.config(#"{"pingTimeoutMs": 120000}"#)])
        let before = try rss(sv.pid)
        // 40 streams of 16 chunks of 1 MiB: 640 MiB sent, at most 256 held.
        let streams = 40
        _ = try sv.cli("call", "--timeout", "120000", "h.pusher", "inputFlood", #"{"path":"h.slow","number":\#(streams)}"#)
        try sv.waitUntil(timeout: 120, "the streams past the limit refused") {
            let answers = try Self.floodAnswers(sv, "h.pusher")
            return answers[0] >= streams - 16 && answers[0] == answers[1]
        }
        let answers = try Self.floodAnswers(sv, "h.pusher")
        // Sixteen streams' first windows fit, less the chunk that would pass the limit (each is 1 MiB
        // and its quotes): 24 or 25 refused.
        #expect((streams - 16)...(streams - 15) ~= answers[1], "\(answers)")
        let grown = try rss(sv.pid) - before
        #expect(grown < 400 << 20, "the supervisor holds \(grown >> 20) MiB more")
        #expect(try sv.call("h.fine", "echo", "1", as: Int.self) == 1)
        #expect(try sv.plugin("h.pusher").state == "running")
        #expect(try sv.plugin("h.slow").state == "running")
    }

    @Test("a client's input for calls that wait for their plugin to start is held up to 256 MiB: the stream that would pass it fails unavailable at once, while the plugin starts, and the supervisor holds no more")
    func inputForWaitingCalls() throws {
        let w = try TestWorld()
        let bundle = try w.bundle("h.late", extra: ["activation": "onCall"])
        // Its start waits at a gate until the test opens it (TestKit's `startup-gate`).
        try "".write(toFile: bundle + "/startup-gate", atomically: true, encoding: .utf8)
        let sv = try RunningSupervisor(w)
        let before = try rss(sv.pid)
        let connection = try rawControl(sv.socket)
        defer { connection.close() }
        // 20 calls with input, each with its 16 chunks of 1 MiB before any grant, while h.late
        // is held at its start: 320 MiB sent, at most 256 held.
        let chunk = "\"" + String(repeating: "x", count: 1 << 20) + "\""
        for id in 1...20 {
            try connection.sendFrame([UInt8].frame(body: Array(#"{"type":"call","id":\#(id),"target":"h.late","method":"sum","params":{},"input":true,"timeoutMs":60000}"#.utf8)))
            for seq in 0..<16 {
                try connection.sendFrame([UInt8].frame(body: Array(#"{"type":"chunk","id":\#(id),"input":true,"seq":\#(seq),"data":\#(chunk)}"#.utf8)))
            }
        }
        // Refused at once, while the plugin is still held at its start: the five whose input would
        // pass the bound (the sixteenth's last chunk, then the four after it).
        let refusal = "held for its calls that wait for their plugin to start"
        let early = Self.answers([connection], count: 5)
        for text in early {
            #expect(text.contains("unavailable") && text.contains("this client has") && text.contains(refusal), "\(text.prefix(300))")
        }
        #expect(try sv.plugin("h.late").state != "running")
        let grown = try rss(sv.pid) - before
        #expect(grown < 400 << 20, "the supervisor holds \(grown >> 20) MiB more")
        // Let go, the plugin answers the fifteen that waited (its `sum` refuses the text chunks):
        // of all twenty, exactly those five were refused for what was held.
        try "".write(toFile: w.home + "/data/h.late/go", atomically: true, encoding: .utf8)
        let all = early + Self.answers([connection], count: 15)
        #expect(all.count == 20, "\(all.count) answered")
        #expect(all.filter { $0.contains(refusal) }.count == 5)
    }

    @Test("requests that wait for a plugin slow to start hold at most 256 MiB: the next is answered unavailable at once, naming why")
    func requestsWaitingForAPlugin() throws {
        let w = try TestWorld()
        let bundle = try w.bundle("h.gated", extra: ["activation": "onCall"])
        try "".write(toFile: bundle + "/startup-gate", atomically: true, encoding: .utf8)
        let sv = try RunningSupervisor(w)
        // Two clients (each has 256 requests served at once), 150 calls of 1 MiB each.
        let big = "\"" + String(repeating: "y", count: 1 << 20) + "\""
        let clients = try (0..<2).map { _ in try rawControl(sv.socket) }
        defer { for c in clients { c.close() } }
        for (n, client) in clients.enumerated() {
            for i in 0..<150 {
                try client.sendFrame([UInt8].frame(body: Array(#"{"type":"call","id":\#(n * 1000 + i + 1),"target":"h.gated","method":"echo","params":[\#(big)],"timeoutMs":60000}"#.utf8)))
            }
        }
        // Refused at once, while the plugin is held at its start: 255 of about 1 MiB fit in 256 MiB,
        // so about 45 are (give or take the first request's room).
        let refusal = "of requests wait for it"
        let early = Self.answers(clients, count: 44)
        for text in early {
            #expect(text.contains("unavailable") && text.contains(refusal), "\(text.prefix(300))")
        }
        #expect(try sv.plugin("h.gated").state != "running")
        // Let go, it answers those that waited: of all 300, 44 to 46 were refused.
        try "".write(toFile: w.home + "/data/h.gated/go", atomically: true, encoding: .utf8)
        let all = early + Self.answers(clients, count: 300 - early.count)
        #expect(all.count == 300, "\(all.count) answered")
        #expect((44...46).contains(all.filter { $0.contains(refusal) }.count), "\(all.filter { $0.contains(refusal) }.count) refused")
        try sv.waitUntil("h.gated running") { try sv.plugin("h.gated").state == "running" }
    }

    @Test("a hello that a plugin's constructor writes before the worker's own, listing 100,000 missing layers, ends the worker as a violation: none is logged")
    func forgedHello() throws {
        let w = try TestWorld()
        let bundle = try w.bundle("f.hello", library: try Self.hostile(), extra: ["restart": "never"])
        try "forgeHello 100000".write(toFile: bundle + "/ctor-action", atomically: true, encoding: .utf8)
        try w.bundle("f.fine")
        let sv = try RunningSupervisor(w, waitForReady: false)
        try sv.waitUntilListening()
        try sv.waitUntil("f.hello ended") { try sv.plugin("f.hello").lastExit != nil }
        let exit = try #require(try sv.plugin("f.hello").lastExit)
        #expect(exit.reason == .protocolViolation && exit.message?.contains("hello lists 100000 entries in sandboxMissing; a worker may list 64") == true, "\(exit)")
        #expect(!sv.log.contains("FORGED"))
        #expect(try sv.call("f.fine", "echo", "1", as: Int.self) == 1)
    }
}
