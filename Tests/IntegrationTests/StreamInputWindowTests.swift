import Foundation
import IPC
import PluginProtocol
import Testing

/// SPEC §13: a stream's initial credit is 16 chunks, for an input as for an answer. A caller may
/// send its input's first 16 chunks with its call, before any grant; the supervisor holds what the
/// plugin has not made room for yet (also while the call waits for the plugin to start).
@Suite(.serialized, .timeLimit(.minutes(3)))
struct StreamInputWindowTests {
    /// Sends a `sum` call and, at once, `count` input chunks (1, 2, …) and the input's end, without
    /// waiting for any grant. Returns the answer's elements and its final frame.
    static func sumAtOnce(_ raw: BlockingConnection, target: String, id: UInt64, count: Int) throws -> (elements: [Int], last: String) {
        func send(_ json: String) throws { try raw.sendFrame([UInt8].frame(body: Array(json.utf8))) }
        try send(#"{"type":"call","id":\#(id),"target":"\#(target)","method":"sum","params":{},"stream":true,"input":true}"#)
        for i in 0..<count { try send(#"{"type":"chunk","id":\#(id),"input":true,"seq":\#(i),"data":\#(i + 1)}"#) }
        try send(#"{"type":"chunk","id":\#(id),"input":true,"seq":\#(count),"end":true}"#)
        var elements: [Int] = []
        while let frame = try raw.receiveFrame() {
            let env = try frame.withUnsafeBytes { try Envelope.parse($0) }
            switch env.kind {
            case .chunk:
                let (range, _) = try #require(StreamFrames.element(of: env))
                elements.append(try #require(Int(String(decoding: frame[range], as: UTF8.self))))
            case .credit:
                continue  // the plugin's grants for the input, passed on
            default:
                return (elements, String(decoding: frame, as: UTF8.self))
            }
        }
        return (elements, "the connection closed")
    }

    static func totals(_ count: Int) -> [Int] { (1...count).map { $0 * ($0 + 1) / 2 } }

    @Test("a client sends its input's first 16 chunks and its end with the call, before any grant: to a running plugin, and to one started for the call (the input waits with the call); all of it reaches the plugin in order")
    func firstWindowWithTheCall() throws {
        let w = try TestWorld()
        try w.bundle("i.kit")
        let lazy = try w.bundle("i.lazy", extra: ["activation": "onCall"])
        try "300".write(toFile: lazy + "/startup-delay-ms", atomically: true, encoding: .utf8)
        let sup = try RunningSupervisor(w)
        for (target, count) in [("i.kit", 16), ("i.lazy", 16), ("i.kit", 5), ("i.kit", 0)] {
            let raw = try rawControl(sup.socket)
            defer { raw.close() }
            let (elements, last) = try Self.sumAtOnce(raw, target: target, id: 3, count: count)
            #expect(elements == (count == 0 ? [] : Self.totals(count)), "\(target), \(count) chunks: \(elements); \(last)")
            #expect(last.contains(#""type":"reply""#) && last.contains(#""result":null"#), "\(target): \(last)")
        }
        #expect(try sup.plugin("i.kit").restarts == 0 && sup.plugin("i.lazy").restarts == 0)
    }

    @Test("a 17th input chunk before any grant is beyond the caller's window: the client is dropped with protocolViolation, naming it; the plugin runs on")
    func beyondTheFirstWindow() throws {
        let w = try TestWorld()
        // Started for the call, and slowly: nothing grants room while the 17 chunks arrive.
        let slow = try w.bundle("i.slow", extra: ["activation": "onCall"])
        try "500".write(toFile: slow + "/startup-delay-ms", atomically: true, encoding: .utf8)
        let sup = try RunningSupervisor(w)
        let raw = try rawControl(sup.socket)
        defer { raw.close() }
        let (elements, last) = try Self.sumAtOnce(raw, target: "i.slow", id: 4, count: 17)
        #expect(elements.isEmpty)
        #expect(last.contains("protocolViolation") && last.contains("input chunk 16 beyond the credit"), "\(last)")
        let again = try rawControl(sup.socket)
        defer { again.close() }
        #expect(try Self.sumAtOnce(again, target: "i.slow", id: 1, count: 3).elements == Self.totals(3))
    }

    @Test("while its call waits for its plugin, a client that breaks the stream's rules (a chunk out of order, input credit from the caller, an answer chunk from the caller, credit of 0) is dropped with protocolViolation, naming what; the plugin runs on",
          arguments: [(#"{"type":"chunk","id":5,"input":true,"seq":3,"data":1}"#, "input chunk 3, expected 0"),
                      (#"{"type":"credit","id":5,"input":true,"n":4}"#, "input credit from the caller"),
                      (#"{"type":"chunk","id":5,"seq":0,"data":1}"#, "an answer chunk from the caller"),
                      (#"{"type":"credit","id":5,"n":0}"#, "credit 0")])
    func hostileWhileWaiting(_ frame: String, _ reason: String) throws {
        let w = try TestWorld()
        let slow = try w.bundle("i.wait", extra: ["activation": "onCall"])
        try "300".write(toFile: slow + "/startup-delay-ms", atomically: true, encoding: .utf8)
        let sup = try RunningSupervisor(w)
        let raw = try rawControl(sup.socket)
        defer { raw.close() }
        try raw.sendFrame([UInt8].frame(body: Array(#"{"type":"call","id":5,"target":"i.wait","method":"sum","params":{},"stream":true,"input":true}"#.utf8)))
        try raw.sendFrame([UInt8].frame(body: Array(frame.utf8)))
        let answer = String(decoding: try #require(try raw.receiveFrame()), as: UTF8.self)
        #expect(answer.contains("protocolViolation") && answer.contains(reason), "\(answer)")
        #expect(try sup.call("i.wait", "echo", "2", as: Int.self) == 2)
    }
}
