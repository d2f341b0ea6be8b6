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

    @Test("128 MiB of calls held for a worker that reads nothing for a while: once they are answered, the supervisor gives the memory back")
    func heldCallsGiveTheirMemoryBack() throws {
        let w = try TestWorld()
        try w.bundle("b.stuck", library: try SandboxTests.hostileLibrary())
        let sv = try RunningSupervisor(w)
        #expect(try sv.call("b.stuck", "heard", as: [String].self).contains("call:heard"))
        let before = try rss(sv.pid)
        let stall = try rawControl(sv.socket)
        defer { stall.close() }
        try stall.sendFrame(callFrame(id: 1, target: "b.stuck", method: "stall", params: #"{"number":2000}"#, timeoutMs: 30_000))
        let text = "\"" + String(repeating: "x", count: 8 << 20) + "\""
        let clients = try (0..<4).map { _ in try rawControl(sv.socket) }
        defer { clients.forEach { $0.close() } }
        for client in clients {
            for id in 1...4 { try client.sendFrame(callFrame(id: UInt64(id), target: "b.stuck", method: "heard", params: text, timeoutMs: 30_000)) }
        }
        for client in clients {
            for _ in 1...4 { #expect(String(decoding: try #require(try client.receiveFrame()).prefix(100), as: UTF8.self).contains(#""result""#)) }
        }
        #expect(String(decoding: try #require(try stall.receiveFrame()), as: UTF8.self).contains(#""result":null"#))
        // It held them; glibc keeps such blocks in its heaps (130 MB more, idle) unless they are trimmed.
        var more = 0
        do {
            try sv.waitUntil("the held calls' memory back") {
                more = try rss(sv.pid) - before
                return more < 48 << 20
            }
        } catch {
            Issue.record("the supervisor holds \(more >> 20) MiB more than before the calls, idle")
        }
    }
}
