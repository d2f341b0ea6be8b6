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

    @Test("attachments on a request that is not a call or an open, inline or by token: badRequest saying so, not ignored; the connection serves on")
    func bytesOnARequestThatTakesNone() throws {
        let w = try TestWorld()
        try w.bundle("s.kit")
        let sv = try RunningSupervisor(w)
        let c = try rawControl(sv.socket)
        defer { c.close() }
        let statusWithBytes = Array(#"{"type":"status","id":1,"attachments":[{"length":3}]}"#.utf8) + [0, 1, 2, 3]
        let sendWithToken = Array(#"{"type":"send","id":2,"name":"memoryWarning","attachments":[{"length":9,"token":"00"}]}"#.utf8)
        for (body, said) in [(statusWithBytes, #"status carries no bytes, and this one has \"attachments\""#),
                             (sendWithToken, #"send carries no bytes, and this one has \"attachments\""#)] {
            try c.sendFrame([UInt8].frame(body: body))
            let answer = String(decoding: try #require(try c.receiveFrame()), as: UTF8.self)
            #expect(answer.contains("badRequest") && answer.contains(said), "\(answer)")
        }
        // None listed (null, an empty list): nothing to refuse. A type the socket does not take is said so first.
        for (body, said) in [(#"{"type":"status","id":4,"attachments":null}"#, "[{"), (#"{"type":"metrics","id":5,"attachments":[ ]}"#, "plugin_"),
                             (#"{"type":"ping","id":6,"attachments":[{"length":1}]}"#, "'ping' is not a request this socket takes")] {
            try c.sendFrame([UInt8].frame(body: Array(body.utf8)))
            let answer = String(decoding: try #require(try c.receiveFrame()), as: UTF8.self)
            #expect(answer.contains(said), "\(body): \(answer.prefix(300))")
        }
        try c.sendFrame(callFrame(id: 3, target: "s.kit", method: "ping"))
        #expect(String(decoding: try #require(try c.receiveFrame()), as: UTF8.self).contains(#""result":1"#))
    }

    @Test("a client that sends part of a frame and then nothing is dropped after 10 s told what came, as a bad frame is")
    func halfAFrameIsTold() throws {
        let w = try TestWorld()
        try w.bundle("s.kit")
        let sv = try RunningSupervisor(w)
        let half = try rawControl(sv.socket)
        defer { half.close() }
        let header: [UInt8] = [0, 0, 0, 100] + Array(#"{"type":"#.utf8)
        _ = header.withUnsafeBytes { write(half.fd, $0.baseAddress, $0.count) }
        var timeout = timeval(tv_sec: 15, tv_usec: 0)
        setsockopt(half.fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let said = String(decoding: try #require(try half.receiveFrame()), as: UTF8.self)
        #expect(said.contains("protocolViolation") && said.contains("12 of a frame's 104 bytes came, then no more for 10 s"), "\(said)")
        #expect(sv.log.contains("dropping control client: 12 of a frame's 104 bytes"))
    }
}
