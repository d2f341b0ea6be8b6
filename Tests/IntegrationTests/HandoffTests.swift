import Foundation
import IPC
import PluginProtocol
import Testing

/// The hand-off socket (`<control socket>.links`, docs/protocol.md "Bytes"): clients that connect
/// and send nothing keep no other client waiting; what a bad request did wrong is said.
@Suite(.serialized, .timeLimit(.minutes(2)))
struct HandoffTests {
    @Test("64 clients connected to the hand-off socket that send nothing: an honest call with 200 KB of input (handed in there) is answered at once; the silent ones are refused after a second, saying no request came")
    func silentClientsKeepNoOneWaiting() throws {
        let w = try TestWorld()
        try w.bundle("h.kit")
        let sv = try RunningSupervisor(w)
        let silent = try (0..<64).map { _ in try BlockingConnection.connect(path: sv.socket + ".links") }
        defer { for c in silent { c.close() } }
        let file = w.root + "/in.bin"
        try Data(repeating: 7, count: 200_000).write(to: URL(fileURLWithPath: file))
        let began = Date()
        let r = try sv.cli("call", "--input", file, "h.kit", "digest")
        let took = Date().timeIntervalSince(began)
        #expect(r.code == 0, "\(r.out)\(r.err)")
        #expect(took < 0.9, "the call took \(took) s")
        // Each silent one hears why it was let go.
        var timeout = timeval(tv_sec: 3, tv_usec: 0)
        setsockopt(silent[0].fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let said = String(decoding: try #require(try silent[0].receiveFrame()), as: UTF8.self)
        #expect(said.contains("no request came within 1000 ms"), "\(said)")
    }

    @Test("40 clients trickling a request to the hand-off socket (its length, then a byte every 100 ms): an honest call with 200 KB of input (handed in there) is answered at once")
    func tricklersKeepNoOneWaiting() throws {
        let w = try TestWorld()
        try w.bundle("h.kit")
        let sv = try RunningSupervisor(w)
        let stop = Guarded(false)
        let path = sv.socket + ".links"
        var threads: [Thread] = []
        for _ in 0..<40 {
            let t = Thread {
                while !stop.withLock({ $0 }) {
                    guard let c = try? BlockingConnection.connect(path: path) else { continue }
                    // A length, then its body a byte at a time: it never comes whole in time.
                    var header: [UInt8] = [0, 0, 0, 100]
                    var byte = UInt8(ascii: " ")
                    if send(c.fd, &header, 4, Int32(MSG_NOSIGNAL)) == 4 {
                        while !stop.withLock({ $0 }), send(c.fd, &byte, 1, Int32(MSG_NOSIGNAL)) == 1 { usleep(100_000) }
                    }
                    c.close()
                }
            }
            t.start()
            threads.append(t)
        }
        defer { stop.withLock { $0 = true } }
        usleep(300_000)
        let file = w.root + "/in.bin"
        try Data(repeating: 7, count: 200_000).write(to: URL(fileURLWithPath: file))
        for _ in 0..<3 {
            let began = Date()
            let r = try sv.cli("call", "--input", file, "h.kit", "digest")
            let took = Date().timeIntervalSince(began)
            #expect(r.code == 0, "\(r.out)\(r.err)")
            #expect(took < 0.9, "the call took \(took) s")
        }
    }

    @Test("a request whose length does not come whole, or whose bytes do not, is refused saying which")
    func partialRequestsAreNamed() throws {
        let w = try TestWorld()
        try w.bundle("h.kit")
        let sv = try RunningSupervisor(w)
        for (sent, expected) in [([UInt8]([0, 0]), "4-byte length did not come"), ([0, 0, 0, 50, 123], "50 bytes did not come within 1000 ms (1 came)")] {
            let c = try BlockingConnection.connect(path: sv.socket + ".links")
            defer { c.close() }
            _ = sent.withUnsafeBytes { write(c.fd, $0.baseAddress, $0.count) }
            var timeout = timeval(tv_sec: 3, tv_usec: 0)
            setsockopt(c.fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            let said = String(decoding: try #require(try c.receiveFrame()), as: UTF8.self)
            #expect(said.contains(expected), "\(said)")
        }
    }
}
