import Foundation
import IPC
import PluginProtocol
import Testing

/// What a control client leaves unread is bounded by what it costs the supervisor: its bytes and
/// each frame's bookkeeping (docs/operations.md "Back-pressure").
@Suite(.serialized, .timeLimit(.minutes(7)))
struct UnreadFramesTests {
    @Test("a client that grants four streams of tiny chunks a million of credit each and reads nothing is dropped before the supervisor holds 600 MiB (each chunk's bookkeeping counted, not only its 60 bytes); the memory goes back; others are served")
    func tinyUnreadChunksAreCountedWithTheirCost() throws {
        guard !Build.threadSanitized else { return }
        let w = try TestWorld()
        try w.bundle("u.rows")
        let sv = try RunningSupervisor(w)
        let before = try rss(sv.pid)
        let conn = try rawControl(sv.socket)
        defer { conn.close() }
        var small: Int32 = 4096
        setsockopt(conn.fd, SOL_SOCKET, SO_RCVBUF, &small, socklen_t(MemoryLayout<Int32>.size))
        for id in UInt64(1)...4 {
            var call = FrameBuilder(kind: .call)
            call.uint("id", id)
            call.string("target", "u.rows")
            call.string("method", "rows")
            call.raw("params", Array(#"{"count":3000000}"#.utf8))
            call.flag("stream")
            call.uint("timeoutMs", 600_000)
            try conn.sendFrame(call.finish())
            try conn.sendFrame([UInt8].frame(body: Array(#"{"type":"credit","id":\#(id),"n":1048560}"#.utf8)))
        }
        var peak = 0
        // Millions of chunks from a debug worker: two minutes on a fast machine is five on a slow one.
        try sv.waitUntil(timeout: 330, "the client dropped") {
            peak = max(peak, try rss(sv.pid))
            return sv.log.contains("dropping a control client that does not read its answers")
        }
        #expect(peak - before < 600 << 20, "the supervisor grew by \(peak - before >> 20) MiB")
        #expect(try sv.call("u.rows", "echo", "[1]", as: [Int].self) == [1])
        // Given back to the system, not only to the allocator.
        try sv.waitUntil("the memory back") { try rss(sv.pid) - before < 200 << 20 }
    }
}
