import Foundation
import IPC
import PluginProtocol
import Testing

/// Requests that wait for their plugin reach it in the order they came, events (`send`) and calls
/// alike (SPEC §8: a call to a plugin that is coming up waits; §16: an inactive one is started).
@Suite(.serialized)
struct WaitingOrderTests {
    @Test("an event sent to an inactive plugin, then a call: the plugin hears the event first, though both waited for its start")
    func anEventThatWaitedGoesBeforeTheCallsAfterIt() throws {
        let w = try TestWorld()
        try w.bundle("o.lazy", library: try SandboxTests.hostileLibrary(), extra: ["activation": "onCall"])
        let sv = try RunningSupervisor(w)
        #expect(try sv.plugin("o.lazy").state == "inactive")
        let c = try rawControl(sv.socket)
        defer { c.close() }
        // Both arrive while the plugin starts for the first: both wait, and go when it runs.
        var both = [UInt8].frame(body: Array(#"{"type":"send","id":1,"name":"memoryWarning","target":"o.lazy"}"#.utf8))
        both += callFrame(id: 2, target: "o.lazy", method: "heard")
        try c.sendFrame(both)
        var heard: String?
        var sent: String?
        while heard == nil || sent == nil {
            let answer = String(decoding: try #require(try c.receiveFrame()), as: UTF8.self)
            if answer.contains(#""id":2"#) { heard = answer } else { sent = answer }
        }
        #expect(sent?.contains(#""delivered":["o.lazy"]"#) == true, "\(sent ?? "")")
        let order = try #require(heard)
        let event = try #require(order.range(of: "event:memoryWarning"), "the event never reached the plugin: \(order)")
        let call = try #require(order.range(of: "call:heard"), "\(order)")
        #expect(event.lowerBound < call.lowerBound, "the call overtook the event that came before it: \(order)")
    }
}
