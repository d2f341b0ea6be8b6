import Foundation
import IPC
import PluginProtocol
import Testing

/// Requests whose members are of the wrong kind are refused naming the member, not read as empty.
@Suite(.serialized)
struct RequestShapeTests {
    @Test("events with a target that is not a string, send with a name that is not a string: badRequest naming the member; the connection serves on")
    func membersOfTheWrongKind() throws {
        let w = try TestWorld()
        try w.bundle("s.kit")
        let sv = try RunningSupervisor(w)
        let c = try rawControl(sv.socket)
        defer { c.close() }
        for (frame, said) in [(#"{"type":"events","id":1,"target":1}"#, #"events' \"target\" is a plugin's identifier"#),
                              (#"{"type":"send","id":2,"name":5}"#, #"send needs a \"name\" string"#)] {
            try c.sendFrame([UInt8].frame(body: Array(frame.utf8)))
            let answer = String(decoding: try #require(try c.receiveFrame()), as: UTF8.self)
            #expect(answer.contains("badRequest") && answer.contains(said), "\(answer)")
        }
        try c.sendFrame(callFrame(id: 3, target: "s.kit", method: "ping"))
        #expect(String(decoding: try #require(try c.receiveFrame()), as: UTF8.self).contains(#""result":1"#))
    }
}
