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
