import Foundation
import IPC
import PluginHost
import PluginProtocol
import Protocol
import SupervisorClient
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Streams (SPEC §13, docs/protocol.md "Streams") through a real `supervisor start`: the CLI, the
/// client library, an embedded host and plugin → plugin; credit end to end, cancellation either way,
/// the idle and whole-call timeouts, a producer that dies, and producers that break the rules.
@Suite(.serialized, .timeLimit(.minutes(3)))
struct StreamTests {
    struct Row: Codable, Sendable, Equatable { var row: Int }
    struct Report: Decodable, Sendable { var sent: Int; var cancelled: Int; var completed: Int }
    struct Relay: Encodable, Sendable { var target: String; var count: Int; var takeOnly: Int? }

    static func report(_ client: SupervisorClient, _ id: String) async throws -> Report {
        try await client.call(id, "streamReport", as: Report.self)
    }

    static func code(_ body: () async throws -> Void) async -> String? {
        do {
            try await body()
            return nil
        } catch {
            return (error as? ErrorBody)?.code ?? "\(error)"
        }
    }

    @Test("supervisor call --stream prints one JSON line per element, from a Swift and a C plugin; an ordinary call of a stream method is refused")
    func cli() throws {
        let w = try TestWorld()
        try w.bundle("s.kit")
        try w.bundle("s.c", library: try Build.cHello())
        let sup = try RunningSupervisor(w)
        let rows = try sup.cli("call", "--stream", "s.kit", "rows", #"{"count":3}"#)
        #expect(rows.code == 0, "\(rows.err)")
        #expect(rows.out.split(separator: "\n") == [#"{"row":0}"#, #"{"row":1}"#, #"{"row":2}"#])
        // 100 elements from C: more than one window, so the reader's credit goes to C too.
        let counted = try sup.cli("call", "--stream", "s.c", "count", #"{"n":100}"#)
        #expect(counted.code == 0, "\(counted.err)")
        #expect(counted.out.split(separator: "\n").map(String.init) == (0..<100).map { #"{"i":\#($0)}"# })
        let plain = try sup.cli("call", "s.kit", "rows", #"{"count":3}"#)
        #expect(plain.code == 1 && plain.err.contains("badRequest") && plain.err.contains("stream"))
        let failed = try sup.cli("call", "--stream", "s.kit", "rows", #"{"count":5,"failAt":2}"#)
        #expect(failed.code == 1 && failed.out.split(separator: "\n").count == 2 && failed.err.contains("failed on purpose"))
    }

    @Test("a client reads a stream in order; an input stream goes to the plugin as it reads; a plugin relays another's stream; metrics count streams and chunks")
    func client() async throws {
        let w = try TestWorld()
        try w.bundle("s.kit")
        try w.bundle("s.relay", deps: [Dep("s.kit")])
        let sup = try RunningSupervisor(w)
        let client = try await SupervisorClient.connect(socket: sup.socket)
        defer { client.close() }
        var seen: [Int] = []
        for try await row in client.stream("s.kit", "rows", ["count": 1000], as: Row.self) { seen.append(row.row) }
        #expect(seen == Array(0..<1000))
        // An input of 100 integers, more than its window: the plugin grants room as it reads.
        let input = AsyncStream<Int> { c in
            for i in 1...100 { c.yield(i) }
            c.finish()
        }
        var totals: [Int] = []
        for try await t in client.stream("s.kit", "sum", [String: Int](), input: input, as: Int.self) { totals.append(t) }
        #expect(totals.count == 100 && totals.last == 5050)
        // Plugin → plugin, through the supervisor, with the credit of both hops.
        var relayed = 0
        for try await row in client.stream("s.relay", "relay", Relay(target: "s.kit", count: 200), as: Row.self) {
            #expect(row.row == relayed)
            relayed += 1
        }
        #expect(relayed == 200)
        let metrics = try sup.cli("metrics").out
        #expect(metrics.contains(#"plugin_streams_total{plugin="s.kit"} 3"#))
        #expect(metrics.contains(#"plugin_stream_chunks_total{plugin="s.kit",direction="answer"} 1300"#))
        #expect(metrics.contains(#"plugin_stream_chunks_total{plugin="s.kit",direction="input"} 100"#))
        #expect(metrics.contains(#"plugin_streams_total{plugin="s.relay"} 1"#))
    }

    @Test("credit end to end: a producer runs exactly as far as its reader's window, and on when the reader reads; a reader that stops reading gets timeout after streamIdleTimeoutMs and the producer is freed")
    func credit() async throws {
        let w = try TestWorld()
        try w.bundle("s.kit", extra: ["limits": ["streamIdleTimeoutMs": 1500]])
        let sup = try RunningSupervisor(w)
        // By hand, to hold the credit: a raw control connection that grants nothing at first.
        let raw = try rawControl(sup.socket)
        defer { raw.close() }
        try raw.sendFrame([UInt8].frame(body: Array(#"{"type":"call","id":7,"target":"s.kit","method":"rows","params":{"count":100},"stream":true}"#.utf8)))
        var chunks = 0
        while chunks < StreamFrames.initialCredit {
            let frame = try #require(try raw.receiveFrame())
            let env = try frame.withUnsafeBytes { try Envelope.parse($0) }
            #expect(env.kind == .chunk && env.id == 7 && env.seq == UInt64(chunks))
            chunks += 1
        }
        let client = try await SupervisorClient.connect(socket: sup.socket)
        defer { client.close() }
        // The 17th waits in `send` for credit: the producer has sent the window and no more.
        try await waitUntil("the producer to send its window") { try await Self.report(client, "s.kit").sent == 16 }
        try raw.sendFrame(StreamFrames.credit(id: 7, n: 8, into: [UInt8]()))
        for _ in 0..<8 {
            let frame = try #require(try raw.receiveFrame())
            #expect(frame.withUnsafeBytes { (try? Envelope.parse($0))?.kind } == .chunk)
        }
        try await waitUntil("the producer to use the new credit") { try await Self.report(client, "s.kit").sent == 24 }
        // Now the reader stops: after the idle timeout the call fails with timeout, and the
        // producer's `send` is cancelled.
        let reply = try #require(try raw.receiveFrame())
        let text = String(decoding: reply, as: UTF8.self)
        #expect(text.contains(#""code":"timeout""#) && text.contains("streamIdleTimeoutMs"), "\(text)")
        try await waitUntil("the producer to be cancelled") { try await Self.report(client, "s.kit").cancelled == 1 }
        #expect(try await Self.report(client, "s.kit").sent == 24)
    }

    @Test("cancellation both ways: a client that stops reading cancels the producer; a plugin that stops reading another's stream cancels it; the whole-call timeout holds for a stream that keeps moving")
    func cancellation() async throws {
        let w = try TestWorld()
        try w.bundle("s.kit")
        try w.bundle("s.relay", deps: [Dep("s.kit")])
        let sup = try RunningSupervisor(w)
        let client = try await SupervisorClient.connect(socket: sup.socket)
        defer { client.close() }
        var taken = 0
        for try await _ in client.stream("s.kit", "rows", ["count": 100_000], as: Row.self) {
            taken += 1
            if taken == 5 { break }
        }
        try await waitUntil("the producer to hear cancel") { try await Self.report(client, "s.kit").cancelled == 1 }
        // A plugin that stops reading (relay takes 3 of 100,000) cancels its producer too.
        var relayed = 0
        for try await _ in client.stream("s.relay", "relay", Relay(target: "s.kit", count: 100_000, takeOnly: 3), as: Row.self) {
            relayed += 1
        }
        #expect(relayed == 3)
        try await waitUntil("the relay's producer to hear cancel") { try await Self.report(client, "s.kit").cancelled == 2 }
        // A stream that keeps moving, slower than its call's timeout allows.
        let slow = await Self.code {
            for try await _ in client.stream("s.kit", "rows", ["count": 100, "delayMs": 50], as: Row.self, timeout: .milliseconds(600)) {}
        }
        #expect(slow == "timeout")
        try await waitUntil("the slow producer to hear cancel") { try await Self.report(client, "s.kit").cancelled == 3 }
        // A task cancelled while it reads.
        let reading = Task {
            for try await _ in client.stream("s.kit", "rows", ["count": 100_000, "delayMs": 5], as: Row.self) {}
        }
        try await waitUntil("the fourth stream to run") { try await Self.report(client, "s.kit").sent > 2_000 + 3 + 16 }
        reading.cancel()
        await #expect(throws: CancellationError.self) { try await reading.value }
        try await waitUntil("the fourth producer to hear cancel") { try await Self.report(client, "s.kit").cancelled == 4 }
    }

    @Test("a client that breaks the rules of a stream (credit of 0 or too much, an answer chunk from the caller, input for a call without input) is dropped with protocolViolation, naming what; credit for a call not in flight is ignored; a call whose bytes are not what it announces is refused with badRequest; the plugin and other clients run on")
    func hostileClients() throws {
        let w = try TestWorld()
        try w.bundle("s.kit")
        let sup = try RunningSupervisor(w)
        let call = [UInt8].frame(body: Array(#"{"type":"call","id":7,"target":"s.kit","method":"rows","params":{"count":100},"stream":true}"#.utf8))
        for (frame, reason) in [(#"{"type":"credit","id":7,"n":0}"#, "credit 0"),
                                (#"{"type":"credit","id":7,"n":99999999}"#, "within 1048576 chunks"),
                                (#"{"type":"chunk","id":7,"seq":0,"data":1}"#, "an answer chunk from the caller"),
                                (#"{"type":"chunk","id":7,"input":true,"seq":0,"data":1}"#, "an input chunk for a call made without")] {
            let raw = try rawControl(sup.socket)
            defer { raw.close() }
            try raw.sendFrame(call)
            // The first chunk shows the call is in flight; then the hostile frame.
            let first = try #require(try raw.receiveFrame())
            #expect(first.withUnsafeBytes { (try? Envelope.parse($0))?.kind } == .chunk)
            try raw.sendFrame([UInt8].frame(body: Array(frame.utf8)))
            var dropped: String?
            while let reply = try raw.receiveFrame() {
                let text = String(decoding: reply, as: UTF8.self)
                if text.contains("protocolViolation") { dropped = text; break }
            }
            #expect(dropped?.contains(reason) == true, "\(frame): \(dropped ?? "not dropped")")
        }
        // Credit for an id not in flight: nothing happens to the connection.
        let quiet = try rawControl(sup.socket)
        defer { quiet.close() }
        try quiet.sendFrame([UInt8].frame(body: Array(#"{"type":"credit","id":99,"n":8}"#.utf8)))
        try quiet.sendFrame([UInt8].frame(body: Array(#"{"type":"call","id":1,"target":"s.kit","method":"ping"}"#.utf8)))
        #expect(String(decoding: try #require(try quiet.receiveFrame()), as: UTF8.self).contains(#""result":1"#))
        // Bytes that are not what the call announces.
        for (body, reason) in [(Array(#"{"type":"call","id":2,"target":"s.kit","method":"echo","params":1,"attachments":[{"length":5}]}"#.utf8) + [0, 1, 2], "announce 5 inline bytes and 2 came"),
                               (Array(#"{"type":"call","id":3,"target":"s.kit","method":"echo","params":1,"attachments":[{"length":5,"fd":true}]}"#.utf8), "control socket cannot carry"),
                               (Array(#"{"type":"call","id":5,"target":"s.kit","method":"echo","params":1,"attachments":[{"length":5,"token":"nope"}]}"#.utf8), "no bytes of 5 were handed in"),
                               (Array(#"{"type":"call","id":4,"target":"s.kit","method":"echo","params":1}"#.utf8) + [0, 9], "no attachments announce it")] {
            try quiet.sendFrame([UInt8].frame(body: body))
            let answer = String(decoding: try #require(try quiet.receiveFrame()), as: UTF8.self)
            #expect(answer.contains("badRequest") && answer.contains(reason), "\(answer)")
        }
        #expect(try sup.plugin("s.kit").state == "running" && sup.plugin("s.kit").restarts == 0)
        #expect(try sup.cli("call", "s.kit", "ping").out.contains("1"))
    }

    struct Via: Encodable, Sendable { var target: String; var method: String? = nil; var count: Int? = nil; var sleepMs: Int? = nil }
    struct Nested: Encodable, Sendable { var target: String; var method: String }

    @Test("streams over a peer link: a plugin reads a dependency's stream and sends it input worker to worker, with the same credit, cancel, idle timeout and metrics; a producer that breaks the rules over the link ends the link, not the worker")
    func overPeerLinks() async throws {
        let w = try TestWorld()
        try w.bundle("s.kit", extra: ["limits": ["streamIdleTimeoutMs": 700]])
        try w.bundle("s.hostile", library: try SandboxTests.hostileLibrary())
        try w.bundle("s.relay", deps: [Dep("s.kit"), Dep("s.hostile")])
        let sup = try RunningSupervisor(w)
        let client = try await SupervisorClient.connect(socket: sup.socket)
        defer { client.close() }
        // The first calls go through the supervisor and make the links.
        #expect(try await client.call("s.relay", "call", Nested(target: "s.kit", method: "ping"), as: Int.self) == 1)
        _ = try await client.callJSON("s.relay", "call", params: Array(#"{"target":"s.hostile","method":"noReplies"}"#.utf8))
        try sup.waitUntil("links from s.relay") { try sup.plugin("s.relay").links == ["s.hostile", "s.kit"] }
        let before = try Prometheus(sup.cli("metrics").out)
        // Over the link: 500 rows in order (more than a window, so credit flows worker to worker),
        // and an input of 100 numbers.
        var relayed = 0
        for try await row in client.stream("s.relay", "relay", Relay(target: "s.kit", count: 500), as: Row.self) {
            #expect(row.row == relayed)
            relayed += 1
        }
        #expect(relayed == 500)
        #expect(try await client.call("s.relay", "sumVia", Via(target: "s.kit", count: 100), as: Int.self) == 5050)
        // A reader that stops early cancels its producer over the link.
        var taken = 0
        for try await _ in client.stream("s.relay", "relay", Relay(target: "s.kit", count: 100_000, takeOnly: 3), as: Row.self) { taken += 1 }
        #expect(taken == 3)
        try await waitUntil("the producer to hear cancel over the link") { try await Self.report(client, "s.kit").cancelled == 1 }
        // A reader that stalls past s.kit's idle timeout (700 ms) gets timeout, and the producer is freed.
        #expect(try await client.call("s.relay", "stallVia", Via(target: "s.kit", sleepMs: 1_500), as: String.self) == "timeout")
        try await waitUntil("the stalled producer to hear cancel") { try await Self.report(client, "s.kit").cancelled == 2 }
        // The caller's worker reports the link's streams: the supervisor counts them as its own.
        try sup.waitUntil("the link's streams in the metrics") {
            let now = try Prometheus(sup.cli("metrics").out)
            let opened = (now["plugin_streams_total", ["plugin": "s.kit"]] ?? 0) - (before["plugin_streams_total", ["plugin": "s.kit"]] ?? 0)
            let input = (now["plugin_stream_chunks_total", ["plugin": "s.kit", "direction": "input"]] ?? 0)
                - (before["plugin_stream_chunks_total", ["plugin": "s.kit", "direction": "input"]] ?? 0)
            return opened == 4 && input == 100
        }
        #expect(try sup.plugin("s.relay").links?.contains("s.kit") == true)
        // Over a link a flood beyond the window ends that link (the caller's worker checks what it
        // receives): the call fails unavailable, and the callee's worker runs on. The reader takes
        // one element and stops, so it grants nothing while the 40 arrive.
        let hostilePID = try sup.plugin("s.hostile").pid
        let flooded = try await client.call("s.relay", "stallVia", Via(target: "s.hostile", method: "streamFlood", sleepMs: 300), as: String.self)
        #expect(flooded == "unavailable", "\(flooded)")
        #expect(try sup.plugin("s.hostile").pid == hostilePID && sup.plugin("s.hostile").lastExit == nil)
        try sup.waitUntil("the broken link's reason in the log") { sup.log.contains("beyond the credit its reader granted") }
        // The link ended by itself, so requests for its callee wait a moment (it might have been
        // dying) and then go on to the live worker: none fails, over a new link or not.
        for _ in 0..<20 {
            let viaRelay = try await client.callJSON("s.relay", "call", params: Array(#"{"target":"s.hostile","method":"noReplies"}"#.utf8))
            #expect(Int(String(decoding: viaRelay, as: UTF8.self)) != nil, "\(String(decoding: viaRelay, as: UTF8.self))")
            #expect(try await client.call("s.hostile", "noReplies", as: Int.self) >= 0)
        }
        #expect(try sup.plugin("s.hostile").pid == hostilePID)
    }

    @Test("a stream of raw bytes (StreamOutput<Bytes>, inline in its chunks): to a client (streamBytes), to the CLI (--stream --output FILE), to an embedded host, and plugin to plugin through the supervisor and over the peer link, every element as it was sent")
    func bytesElements() async throws {
        let w = try TestWorld()
        try w.bundle("s.kit")
        try w.bundle("s.relay", deps: [Dep("s.kit")])
        let sup = try RunningSupervisor(w)
        func expected(_ k: Int, _ size: Int) -> [UInt8] { (0..<size).map { UInt8((k + $0) % 251) } }
        let client = try await SupervisorClient.connect(socket: sup.socket)
        var k = 0
        for try await element in client.streamBytes("s.kit", "blobBytes", ["count": 40, "size": 65_536]) {
            #expect(element == expected(k, 65_536), "element \(k)")
            k += 1
        }
        #expect(k == 40)
        // An element over 64 KiB is the producer's error, and the stream ends with it.
        let tooBig = await Self.code { for try await _ in client.streamBytes("s.kit", "blobBytes", ["count": 1, "size": 65_537]) {} }
        #expect(tooBig == "badRequest")
        // Plugin to plugin: the first through the supervisor (and the link made), then over the link.
        for round in 0..<3 {
            struct RelayBytes: Encodable { var target: String; var count: Int; var size: Int }
            let wrong = try await client.call("s.relay", "bytesStreamRelay", RelayBytes(target: "s.kit", count: 50, size: 1000 + round * 30_000), as: Int.self)
            #expect(wrong == 0, "round \(round)")
            if round == 0 { try sup.waitUntil("a link from s.relay") { try sup.plugin("s.relay").links == ["s.kit"] } }
        }
        client.close()
        let out = w.root + "/stream.bin"
        let cli = try sup.cli("call", "--stream", "--output", out, "s.kit", "blobBytes", #"{"count":3,"size":1000}"#)
        #expect(cli.code == 0 && cli.out.split(separator: "\n") == [#"{"bytes":1000}"#, #"{"bytes":1000}"#, #"{"bytes":1000}"#], "\(cli.out) \(cli.err)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: out)) == Data(expected(0, 1000) + expected(1, 1000) + expected(2, 1000)))
        sup.signal(SIGTERM)
        _ = try sup.waitForExit()

        let (host, running) = try await HostTests.start(w)
        k = 0
        for try await element in host.streamBytes("s.kit", "blobBytes", ["count": 20, "size": 4000]) {
            #expect(element == expected(k, 4000))
            k += 1
        }
        #expect(k == 20)
        await host.shutdown()
        try await running.value
    }

    @Test("a producer that dies mid-stream ends it with unavailable, and the next stream works; streams to and from an embedded host")
    func faultsAndHost() async throws {
        let w = try TestWorld()
        try w.bundle("s.kit")
        let sup = try RunningSupervisor(w)
        let client = try await SupervisorClient.connect(socket: sup.socket)
        var got = 0
        let crashed = await Self.code {
            for try await _ in client.stream("s.kit", "rows", ["count": 10, "crashAt": 4], as: Row.self) { got += 1 }
        }
        #expect(crashed == "unavailable" && got == 4)
        try await waitUntil("s.kit to serve again", within: 20) {
            var n = 0
            for try await _ in client.stream("s.kit", "rows", ["count": 3], as: Row.self) { n += 1 }
            return n == 3
        }
        client.close()
        sup.signal(SIGTERM)
        _ = try sup.waitForExit()

        let (host, running) = try await HostTests.start(w)
        var rows: [Int] = []
        for try await row in host.stream("s.kit", "rows", ["count": 300], as: Row.self) { rows.append(row.row) }
        #expect(rows == Array(0..<300))
        let input = AsyncStream<Int> { c in
            for i in 1...40 { c.yield(i) }
            c.finish()
        }
        var last = 0
        for try await t in host.stream("s.kit", "sum", [String: Int](), input: input, as: Int.self) { last = t }
        #expect(last == 820)
        var taken = 0
        for try await _ in host.stream("s.kit", "rows", ["count": 100_000], as: Row.self) {
            taken += 1
            if taken == 2 { break }
        }
        try await waitUntil("the host's producer to hear cancel") {
            try await host.call("s.kit", "streamReport", as: Report.self).cancelled == 1
        }
        await host.shutdown()
        try await running.value
    }

    static let hostileProducers = ["streamFlood", "streamBadSeq", "streamStray", "streamBytesShort", "streamBytesFd"]

    @Test("producers that break the rules (more chunks than their credit, a chunk out of order, a chunk for an id never used, a chunk's bytes other than announced or passed as a memfd) are ended alone as protocol violations; 10,000 streams opened and abandoned leave the supervisor's descriptors and memory where they were")
    func hostileAndAbandoned() async throws {
        let w = try TestWorld()
        let lib = try SandboxTests.hostileLibrary()
        for name in Self.hostileProducers {
            try w.bundle("s.\(name.lowercased())", library: lib, extra: ["restart": "never"])
        }
        try w.bundle("s.kit")
        let sup = try RunningSupervisor(w)
        let client = try await SupervisorClient.connect(socket: sup.socket)
        defer { client.close() }
        for name in Self.hostileProducers {
            let id = "s.\(name.lowercased())"
            let code = await Self.code { for try await _ in client.streamJSON(id, name, params: nil) {} }
            #expect(code == "unavailable", "\(id)")
            try sup.waitUntil("\(id) ended") { try sup.plugin(id).lastExit != nil }
            let exit = try #require(try sup.plugin(id).lastExit)
            #expect(exit.reason == .protocolViolation, "\(id): \(exit)")
        }
        #expect(try sup.plugin("s.streambytesshort").lastExit?.message?.contains("announces 10 inline bytes and 5 came") == true)
        #expect(try sup.plugin("s.streambytesfd").lastExit?.message?.contains("inline") == true)
        #expect(try sup.plugin("s.kit").state == "running")
        // Open and abandon streams: each reads one element and leaves.
        func abandon(_ count: Int) async throws {
            for _ in 0..<count {
                for try await _ in client.stream("s.kit", "rows", ["count": 1_000], as: Row.self) { break }
            }
        }
        try await abandon(200)
        try await waitUntil("200 producers cancelled", within: 30) { try await Self.report(client, "s.kit").cancelled == 200 }
        // The client's direct link (asked for after its first call) holds a descriptor in the
        // supervisor (docs/protocol.md "Calls that survive a crash"): made before the count.
        try await waitUntil("the client's link to s.kit") { _ = try await Self.report(client, "s.kit"); return client.linkedPlugins == ["s.kit"] }
        let fdsBefore = try openFDs(sup.pid)
        let rssBefore = try rss(sup.pid)
        // 10,000 (2,000 in the instrumented run, ten times slower).
        let count = Build.threadSanitized ? 2_000 : 10_000
        try await abandon(count)
        try await waitUntil("all \(count + 200) producers cancelled", within: 90) { try await Self.report(client, "s.kit").cancelled == count + 200 }
        #expect(try openFDs(sup.pid) <= fdsBefore)
        let grown = try rss(sup.pid) - rssBefore
        #expect(grown < 4 << 20, "the supervisor grew \(grown >> 10) KiB over \(count) abandoned streams")
    }
}
