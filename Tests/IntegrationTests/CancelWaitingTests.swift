import Foundation
import IPC
import PluginProtocol
import Testing

/// A `cancel` for a call that still waits for its plugin (docs/protocol.md, "cancel").
@Suite(.serialized, .timeLimit(.minutes(2)))
struct CancelWaitingTests {
    @Test("a call cancelled while it waits for its plugin to start never reaches the plugin and is not answered; the connection's next call is")
    func cancelledWhileWaiting() throws {
        let w = try TestWorld()
        let slow = try w.bundle("c.slow", extra: ["activation": "onCall"])
        try "300".write(toFile: slow + "/startup-delay-ms", atomically: true, encoding: .utf8)
        let sup = try RunningSupervisor(w)
        let raw = try rawControl(sup.socket)
        defer { raw.close() }
        func send(_ json: String) throws { try raw.sendFrame([UInt8].frame(body: Array(json.utf8))) }
        try send(#"{"type":"call","id":1,"target":"c.slow","method":"sleep","params":{"ms":7}}"#)
        try send(#"{"type":"cancel","id":1}"#)
        try send(#"{"type":"call","id":2,"target":"c.slow","method":"sleep","params":{"ms":50}}"#)
        let answer = String(decoding: try #require(try raw.receiveFrame()), as: UTF8.self)
        #expect(answer.contains(#""id":2"#) && answer.contains(#""result":50"#), "\(answer)")
        // Both left the queue together, the cancelled one first: had it been sent, it would have
        // started before the one that slept 50 ms and answered.
        let events = try sup.info("c.slow").names
        #expect(events.contains("sleeping:50") && !events.contains("sleeping:7"), "\(events)")
    }
}

/// `send` of an event to one plugin that is not running yet (SPEC §16).
@Suite(.serialized, .timeLimit(.minutes(2)))
struct SendWhileStartingTests {
    @Test("two events sent at once to an inactive onCall plugin: the first starts it, the second finds it starting; both wait for it and both are delivered")
    func twoEventsToAnInactivePlugin() throws {
        let w = try TestWorld()
        let lazy = try w.bundle("e.lazy", extra: ["activation": "onCall"])
        try "300".write(toFile: lazy + "/startup-delay-ms", atomically: true, encoding: .utf8)
        let sup = try RunningSupervisor(w)
        let raw = try rawControl(sup.socket)
        defer { raw.close() }
        for (id, name) in [(1, "background"), (2, "foreground")] {
            try raw.sendFrame([UInt8].frame(body: Array(#"{"type":"send","id":\#(id),"name":"\#(name)","target":"e.lazy"}"#.utf8)))
        }
        for _ in 0..<2 {
            let answer = String(decoding: try #require(try raw.receiveFrame()), as: UTF8.self)
            #expect(answer.contains(#""delivered":["e.lazy"]"#), "\(answer)")
        }
        let names = try sup.info("e.lazy").names
        #expect(names.contains("background") && names.contains("foreground"), "\(names)")
    }
}

extension SendWhileStartingTests {
    @Test("an event that waited for an onCall plugin that then fails to start is answered unavailable with the reason, and is not counted as one of the plugin's calls")
    func eventForAPluginThatFailsToStart() throws {
        let w = try TestWorld()
        let broken = try w.bundle("e.broken", extra: ["activation": "onCall", "restart": "never"])
        try "".write(toFile: broken + "/fail-startup", atomically: true, encoding: .utf8)
        let sup = try RunningSupervisor(w)
        let sent = try sup.cli("send", "background", "--plugin", "e.broken")
        #expect(sent.code != 0 && sent.err.contains("unavailable") && sent.err.contains("startup refused on purpose"), "\(sent.out)\(sent.err)")
        let metrics = try sup.cli("metrics").out
        #expect(metrics.contains(#"plugin_calls_total{plugin="e.broken",outcome="unavailable"} 0"#), "\(metrics)")
    }
}

/// What waits for a plugin when the supervisor shuts down (docs/operations.md, "No call lost").
@Suite(.serialized, .timeLimit(.minutes(2)))
struct ShutdownWhileWaitingTests {
    @Test("SIGTERM while one call waits for an onCall plugin's activation and another for a plugin in restart backoff, and no worker takes long to stop: both callers are answered `unavailable`, the supervisor is shutting down")
    func answeredAtAQuickShutdown() throws {
        let w = try TestWorld()
        let slow = try w.bundle("w.slow", extra: ["activation": "onCall"])
        try "3000".write(toFile: slow + "/startup-delay-ms", atomically: true, encoding: .utf8)
        try w.bundle("w.crashy")
        let sup = try RunningSupervisor(w, args: ["--config", try w.config(#"{"restartBackoffBaseMs": 5000}"#)])
        // The first crash restarts at once, the second waits 5 s.
        for n in 1...2 {
            _ = try sup.cli("call", "w.crashy", "crash", #"{"how":"segv"}"#)
            try sup.waitUntil("crash \(n) seen") { try sup.plugin("w.crashy").restarts == n }
        }
        let callers = try ["w.slow", "w.crashy"].map { target in
            let raw = try rawControl(sup.socket)
            try raw.sendFrame([UInt8].frame(body: Array(#"{"type":"call","id":1,"target":"\#(target)","method":"echo","params":[1]}"#.utf8)))
            return raw
        }
        defer { callers.forEach { $0.close() } }
        try sup.waitUntil("w.slow starting") { try sup.plugin("w.slow").state == "starting" }
        sup.signal(SIGTERM)
        for raw in callers {
            let answer = try raw.receiveFrame().map { String(decoding: $0, as: UTF8.self) }
            #expect(answer?.contains(#""code":"unavailable","message":"the supervisor is shutting down""#) == true, "\(answer ?? "the connection closed without an answer")")
        }
        #expect(try sup.waitForExit() == 0)
    }
}
