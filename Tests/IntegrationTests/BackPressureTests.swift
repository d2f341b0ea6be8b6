import Foundation
import IPC
import PluginProtocol
import Testing

/// A worker's socket that takes no more for now (docs/operations.md "Back-pressure"): requests for
/// it wait in its plugin's wait queue and go once it has read what was queued, rather than fail.
@Suite(.serialized, .timeLimit(.minutes(2)))
struct BackPressureTests {
    @Test("one client's 8 MiB call, then another client's five small calls right behind it: every call is answered (the small ones waited for the worker to read the large one)")
    func aLargeRequestDoesNotFailTheNextOnes() throws {
        let w = try TestWorld()
        try w.bundle("b.kit")
        let sv = try RunningSupervisor(w)
        let large = try rawControl(sv.socket)
        let small = try rawControl(sv.socket)
        defer { large.close(); small.close() }
        let text = "\"" + String(repeating: "x", count: 8 << 20) + "\""
        try large.sendFrame(callFrame(id: 1, target: "b.kit", method: "echo", params: text, timeoutMs: 30_000))
        // All five in one write, read together.
        var frames: [UInt8] = []
        for id in 1...5 { frames += callFrame(id: UInt64(id), target: "b.kit", method: "echo", params: "[\(id)]", timeoutMs: 30_000) }
        _ = frames.withUnsafeBytes { write(small.fd, $0.baseAddress, $0.count) }
        for _ in 1...5 {
            let answer = String(decoding: try #require(try small.receiveFrame()), as: UTF8.self)
            #expect(answer.contains(#""result""#), "\(answer.prefix(300))")
        }
        let big = try #require(try large.receiveFrame())
        #expect(big.count > 8 << 20 && String(decoding: big.prefix(200), as: UTF8.self).contains(#""result""#))
    }
}
