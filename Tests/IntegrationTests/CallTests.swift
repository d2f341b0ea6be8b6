import Foundation
import IPC
import PluginProtocol
import Protocol
import Testing

@Suite(.serialized, .timeLimit(.minutes(3)))
struct CallTests {
    @Test("the examples answer: greeter, welcome calling greeter, C plugin, open, asyncworks with Foundation")
    func examples() throws {
        let w = try TestWorld()
        try w.bundle("com.example.greeter", version: "1.2.0", library: Build.library("Greeter"))
        try w.bundle("com.example.welcome", deps: [Dep("com.example.greeter", ">=1.0.0 <2.0.0")], library: Build.library("Welcome"))
        try w.bundle("com.example.chello", library: try Build.cHello())
        try w.bundle("com.example.asyncworks", library: Build.library("AsyncWorks"))
        let sv = try RunningSupervisor(w)
        #expect(try sv.call("com.example.greeter", "username", as: String.self) == "ELMaestro")
        #expect(try sv.call("com.example.welcome", "welcome", as: String.self) == "Welcome back, ELMaestro! Hello, friend!")
        #expect(try sv.call("com.example.chello", "add", "[40, 2]", as: Int.self) == 42)
        #expect(try sv.call("com.example.chello", "hello", as: String.self) == "hello from C")
        // A message with quotes in it is sent as JSON: the worker lives on.
        let typo = try sv.cli("call", "com.example.chello", "bytes", #"{"n":-1}"#)
        #expect(typo.code != 0 && typo.err.contains(#"badRequest: bytes takes {"n": N}"#), "\(typo.err)")
        #expect(try sv.plugin("com.example.chello").restarts == 0)
        let opened = try sv.cli("open", "plugin://com.example.greeter/hello?name=Ada%20L")
        #expect(opened.code == 0)
        #expect(opened.out.contains(#""greeting":"Hello, Ada L!""#))
        let viaPlugin = try sv.call("com.example.welcome", "openGreeter", #"{"name":"Grace"}"#, as: [String: String].self)
        #expect(viaPlugin["greeting"] == "Hello, Grace!")
        struct Report: Decodable { var sum: Int; var uuid: String; var dataFileBytes: Int }
        let report = try sv.call("com.example.asyncworks", "work", as: Report.self)
        #expect(report.sum == 204 + 42)
        #expect(report.uuid.count == 36)
        #expect(report.dataFileBytes > 0)
        // Errors come back as `code: message` on stderr with a non-zero exit.
        let bad = try sv.cli("call", "com.example.greeter", "greet", #"{"name":""}"#)
        #expect(bad.code != 0)
        #expect(bad.err.contains("badRequest: name must not be empty"))
        let noMethod = try sv.cli("call", "com.example.greeter", "nope")
        #expect(noMethod.err.contains("notFound: no method 'nope'"))
        let noPlugin = try sv.cli("call", "com.example.nobody", "x")
        #expect(noPlugin.err.contains("notFound: no plugin com.example.nobody"))
        let badJSON = try sv.cli("call", "com.example.greeter", "greet", "{nope")
        #expect(badJSON.code != 0)
        #expect(badJSON.err.contains("not valid JSON"))
    }

    @Test("plugin to plugin: allowed to dependencies, denied otherwise, errors carried back")
    func pluginToPlugin() throws {
        let w = try TestWorld()
        try w.bundle("p.base")
        try w.bundle("p.user", deps: [Dep("p.base")])
        try w.bundle("p.stranger")
        let sv = try RunningSupervisor(w)
        #expect(try sv.call("p.user", "call", #"{"target":"p.base","method":"echo","params":{"x":1}}"#, as: [String: Int].self) == ["x": 1])
        let denied = try sv.cli("call", "p.user", "call", #"{"target":"p.stranger","method":"echo","params":1}"#)
        #expect(denied.err.contains("denied: p.user may only call its declared dependencies"))
        let custom = try sv.cli("call", "p.user", "call", #"{"target":"p.base","method":"fail"}"#)
        #expect(custom.err.contains("custom: failed on purpose"))
        let openOK = try sv.call("p.user", "open", #"{"uri":"plugin://p.base/echo?a=1&b=two"}"#, as: [String: String].self)
        #expect(openOK == ["a": "1", "b": "two"])
        let openDenied = try sv.cli("call", "p.user", "open", #"{"uri":"plugin://p.stranger/echo"}"#)
        #expect(openDenied.err.contains("denied"))
    }

    @Test("a call whose timeoutMs is not a whole number is refused as such, not run with the default deadline")
    func aTimeoutThatIsNotOne() throws {
        let w = try TestWorld()
        try w.bundle("k.t")
        let sv = try RunningSupervisor(w)
        let conn = try rawControl(sv.socket)
        defer { conn.close() }
        for (id, bad) in [(1, #""500""#), (2, "-1"), (3, "2.5"), (4, "{}")] {
            try conn.sendFrame(framed(#"{"type":"call","id":\#(id),"target":"k.t","method":"echo","params":1,"timeoutMs":\#(bad)}"#))
            let reply = String(decoding: try #require(try conn.receiveFrame()), as: UTF8.self)
            #expect(reply.contains("badRequest") && reply.contains("timeoutMs must be a whole number of milliseconds"), "\(bad): \(reply)")
        }
        // null is no deadline of its own: the plugin's.
        try conn.sendFrame(framed(#"{"type":"call","id":5,"target":"k.t","method":"echo","params":7,"timeoutMs":null}"#))
        #expect(String(decoding: try #require(try conn.receiveFrame()), as: UTF8.self).contains(#""result":7"#))
    }

    @Test("100 calls in flight on one connection; one slow call finishes last without delaying the others")
    func concurrentCalls() throws {
        let w = try TestWorld()
        try w.bundle("k.one")
        let sv = try RunningSupervisor(w)
        let conn = try rawControl(sv.socket)
        defer { conn.close() }
        var b = FrameBuilder(kind: .call)
        b.uint("id", 1000)
        b.string("target", "k.one")
        b.string("method", "sleep")
        b.raw("params", Array(#"{"ms":1500}"#.utf8))
        try conn.sendFrame(b.finish())
        let started = Date()
        for i in 1...99 {
            var c = FrameBuilder(kind: .call)
            c.uint("id", UInt64(i))
            c.string("target", "k.one")
            c.string("method", i % 2 == 0 ? "echo" : "sleep")
            c.raw("params", Array((i % 2 == 0 ? "[\(i)]" : #"{"ms":10}"#).utf8))
            try conn.sendFrame(c.finish())
        }
        var order: [UInt64] = []
        var fastDone: TimeInterval = 0
        while order.count < 100 {
            let frame = try #require(try conn.receiveFrame())
            let id = try frame.withUnsafeBytes { try Envelope.parse($0).id }
            order.append(try #require(id))
            if order.count == 99 { fastDone = Date().timeIntervalSince(started) }
        }
        #expect(order.last == 1000)
        #expect(Set(order).count == 100)
        #expect(fastDone < 1.0, "99 fast calls took \(fastDone) s behind one slow call")
    }

    @Test("calls answered just before a crash or an exit in the same batch keep their answers (the worker's held replies are sent before it ends)",
          arguments: ["segv", "exit3"])
    func answersBeforeAnEndAreSent(how: String) throws {
        let w = try TestWorld()
        try w.bundle("h.one")
        let sv = try RunningSupervisor(w)
        let conn = try rawControl(sv.socket)
        defer { conn.close() }
        // Twenty calls and the crash in one write: the supervisor forwards them in one batch, and
        // the worker reads them together, holding the twenty replies when the last one ends it.
        let batch = (UInt64(1)...20).flatMap { callFrame(id: $0, target: "h.one", method: "echo", params: "[\($0)]") }
            + callFrame(id: 21, target: "h.one", method: "crash", params: #"{"how":"\#(how)"}"#)
        try conn.sendFrame(batch)
        var answered = Set<UInt64>(), failed = Set<UInt64>()
        for _ in 0..<21 {
            let frame = try #require(try conn.receiveFrame())
            let id = try #require(try frame.withUnsafeBytes { try Envelope.parse($0).id })
            if String(decoding: frame, as: UTF8.self).contains("\"result\"") { answered.insert(id) } else { failed.insert(id) }
        }
        #expect(answered == Set(UInt64(1)...20), "failed: \(failed.sorted())")
        #expect(failed == [21])
    }

    @Test("workers that poll before sleeping (workerSpinMicroseconds) answer every call: back to back, 64 in flight, after a pause, and plugin to plugin")
    func pollingWorkers() throws {
        let w = try TestWorld()
        try w.bundle("s.base")
        try w.bundle("s.user", deps: [Dep("s.base")])
        let config = w.root + "/config-spin.json"
        try #"{"workerSpinMicroseconds": 100}"#.write(toFile: config, atomically: true, encoding: .utf8)
        let sv = try RunningSupervisor(w, args: ["--config", config])
        let conn = try rawControl(sv.socket)
        defer { conn.close() }
        func call(_ id: UInt64) throws { try conn.sendFrame(callFrame(id: id, target: "s.base", method: "echo", params: "[\(id)]")) }
        func replies(_ count: Int) throws -> Set<UInt64> {
            var ids = Set<UInt64>()
            for _ in 0..<count {
                let frame = try #require(try conn.receiveFrame())
                let env = try frame.withUnsafeBytes { try Envelope.parse($0) }
                #expect(String(decoding: frame, as: UTF8.self).contains("\"result\""), "\(String(decoding: frame, as: UTF8.self))")
                ids.insert(try #require(env.id))
            }
            return ids
        }
        // Back to back: each reply before the next call (the worker polls between them).
        for i in UInt64(1)...300 {
            try call(i)
            #expect(try replies(1) == [i])
        }
        // 64 in flight at once.
        for i in UInt64(1001)...1064 { try call(i) }
        #expect(try replies(64) == Set(UInt64(1001)...1064))
        // After a pause longer than any window, the worker sleeps and is woken as usual.
        usleep(50_000)
        try call(2000)
        #expect(try replies(1) == [2000])
        // Plugin to plugin, through both workers.
        let relayed = try sv.call("s.user", "call", #"{"target":"s.base","method":"echo","params":[7]}"#, as: [Int].self)
        #expect(relayed == [7])
    }

    @Test("a call that outlives its timeout fails with timeout and does not block the next")
    func timeouts() throws {
        let w = try TestWorld()
        try w.bundle("k.slow", extra: ["limits": ["callTimeoutMs": 300]])
        let sv = try RunningSupervisor(w)
        let t0 = Date()
        let r = try sv.cli("call", "k.slow", "sleep", #"{"ms":5000}"#)
        #expect(r.err.contains("timeout: k.slow did not answer call in time"), "\(r.err)")
        #expect(Date().timeIntervalSince(t0) < 3)
        let perCall = try sv.cli("call", "--timeout", "100", "k.slow", "sleep", #"{"ms":2000}"#)
        #expect(perCall.err.contains("timeout"), "\(perCall.err)")
        #expect(try sv.call("k.slow", "echo", "\"after\"", as: String.self) == "after")
        // A supervisor that does not answer at all (stopped): the CLI gives up 5 s after the call's
        // own timeout, saying so.
        kill(sv.pid, SIGSTOP)
        defer { kill(sv.pid, SIGCONT) }
        let t1 = Date()
        let stopped = try sv.cli("call", "--timeout", "200", "k.slow", "echo", "1")
        #expect(stopped.code == 1 && stopped.err.contains("timeout: the supervisor did not answer within 5200 ms"), "\(stopped.err)")
        #expect(Date().timeIntervalSince(t1) < 10)
        // The same for a call whose answer's bytes go to a file.
        let stoppedBytes = try sv.cli("call", "--timeout", "200", "--output", w.root + "/out.bin", "k.slow", "echo", "1")
        #expect(stoppedBytes.code == 1 && stoppedBytes.err.contains("timeout: the supervisor did not answer within 5200 ms"), "\(stoppedBytes.err)")
        // And a stream's.
        let stoppedStream = try sv.cli("call", "--stream", "--timeout", "200", "k.slow", "echo", "1")
        #expect(stoppedStream.code == 1 && stoppedStream.err.contains("timeout: the supervisor did not answer within 5200 ms"), "\(stoppedStream.err)")
        kill(sv.pid, SIGCONT)
        #expect(try sv.call("k.slow", "echo", "\"again\"", as: String.self) == "again")
    }

    @Test("oversized and garbage frames drop that client only; the supervisor keeps serving")
    func badFrames() throws {
        let w = try TestWorld()
        try w.bundle("k.one")
        let sv = try RunningSupervisor(w, args: [])
        // Oversized: header says 64 MiB.
        let big = try rawControl(sv.socket)
        try big.sendFrame([0x04, 0, 0, 0, 0x7B])
        let answer = try big.receiveFrame()
        #expect(answer.map { String(decoding: $0, as: UTF8.self).contains("protocolViolation") } == true)
        #expect(try big.receiveFrame() == nil)  // dropped
        // Zero length.
        let zero = try rawControl(sv.socket)
        try zero.sendFrame([0, 0, 0, 0])
        _ = try? zero.receiveFrame()
        #expect((try? zero.receiveFrame()) ?? nil == nil)
        // Garbage JSON inside a valid frame.
        let garbage = try rawControl(sv.socket)
        try garbage.sendFrame([UInt8].frame(body: Array("{\"type\": call,,,}".utf8)))
        let g = try #require(try garbage.receiveFrame())
        #expect(String(decoding: g, as: UTF8.self).contains("invalid JSON"))
        // Nested past the depth limit.
        let deep = try rawControl(sv.socket)
        let nested = #"{"type":"call","id":1,"params":"# + String(repeating: "[", count: 200) + String(repeating: "]", count: 200) + "}"
        try deep.sendFrame([UInt8].frame(body: Array(nested.utf8)))
        let d = try #require(try deep.receiveFrame())
        #expect(String(decoding: d, as: UTF8.self).contains("nested deeper"))
        // Unknown type.
        let unknown = try rawControl(sv.socket)
        try unknown.sendFrame([UInt8].frame(body: Array(#"{"type":"teleport","id":1}"#.utf8)))
        #expect(String(decoding: try #require(try unknown.receiveFrame()), as: UTF8.self).contains("unknown message type 'teleport'"))
        // Everyone else is fine.
        #expect(try sv.call("k.one", "echo", "7", as: Int.self) == 7)
        #expect(try sv.plugin("k.one").state == "running")
    }

    @Test("plugin stdout junk is logged under its identifier and never corrupts the protocol")
    func stdoutJunk() throws {
        let w = try TestWorld()
        try w.bundle("k.noisy")
        let sv = try RunningSupervisor(w)
        #expect(try sv.call("k.noisy", "junk", as: String.self) == "ok")
        #expect(try sv.call("k.noisy", "echo", "[1,2]", as: [Int].self) == [1, 2])
        try sv.waitUntil("the junk line in the log") { sv.log.contains("JUNK-LINE-FROM-PLUGIN") }
        let line = try #require(sv.log.split(separator: "\n").first { $0.contains("JUNK-LINE-FROM-PLUGIN") })
        #expect(line.contains("plugin=k.noisy"))
        #expect(line.contains("stdout"))
        #expect(try sv.plugin("k.noisy").restarts == 0)
    }

    @Test("libraries that cannot load are clear errors naming the file")
    func loadErrors() throws {
        let w = try TestWorld()
        let noSymbol = try Build.cLibrary("nosymbol", source: "int nothing_here(void) { return 1; }\n")
        let wrongABI = try Build.cLibrary("wrongabi", source: """
            #include "sp_plugin.h"
            static void r(void *c, const uint8_t *j, size_t l) { (void)c; (void)j; (void)l; }
            static const sp_plugin p = { 99, 0, r, 0 };
            const sp_plugin *sp_plugin_create(const sp_host *h) { (void)h; return &p; }
            """)
        let nullCreate = try Build.cLibrary("nullcreate", source: """
            #include "sp_plugin.h"
            const sp_plugin *sp_plugin_create(const sp_host *h) { (void)h; return 0; }
            """)
        let notELF = w.root + "/libnotelf.so"
        try "this is not a library".write(toFile: notELF, atomically: true, encoding: .utf8)
        try w.bundle("e.nosymbol", library: noSymbol)
        try w.bundle("e.wrongabi", library: wrongABI)
        try w.bundle("e.null", library: nullCreate)
        try w.bundle("e.notelf", library: notELF)
        // A real library whose header says another machine (AArch64, 183): the loader says the
        // file is not there.
        var elf = try Data(contentsOf: URL(fileURLWithPath: nullCreate))
        elf[18] = 183
        elf[19] = 0
        let foreign = w.root + "/libforeign.so"
        try elf.write(to: URL(fileURLWithPath: foreign))
        try w.bundle("e.foreign", library: foreign)
        let missing = try w.bundle("e.missing")
        try FileManager.default.removeItem(atPath: missing + "/libTestKit.so")
        // Named with another case than the manifest's: the folder's libraries are named.
        let wrongCase = try w.bundle("e.case")
        try FileManager.default.moveItem(atPath: wrongCase + "/libTestKit.so", toPath: wrongCase + "/libtestkit.so")
        try w.bundle("e.fine")
        let sv = try RunningSupervisor(w, args: [])
        try sv.waitUntil(timeout: 20, "the broken plugins to fail") {
            try sv.status().filter { $0.identifier != "e.fine" }.allSatisfy { $0.state == "failed" }
        }
        let st = try sv.status()
        func exit(_ id: String) throws -> PluginProtocol.ExitStatus { try #require(st.first { $0.identifier == id }?.lastExit) }
        #expect(try exit("e.nosymbol").reason == .missingSymbol)
        #expect(try exit("e.nosymbol").message?.contains("libnosymbol.so does not export sp_plugin_create") == true)
        #expect(try exit("e.wrongabi").reason == .abiMismatch)
        #expect(try exit("e.wrongabi").message?.contains("speaks ABI version 99") == true)
        let null = try exit("e.null")
        #expect(null.reason == .createFailed, "\(null): \(sv.log.split(separator: "\n").filter { $0.contains("e.null") }.joined(separator: "\n"))")
        #expect(try exit("e.notelf").reason == .loadError)
        let notELFExit = try exit("e.notelf")
        #expect(notELFExit.message?.contains("libnotelf.so: it is not an ELF shared library (it starts with \"this is not a li\")") == true, "\(notELFExit)")
        let foreignExit = try exit("e.foreign")
        #expect(foreignExit.reason == .loadError && foreignExit.message?.contains("libforeign.so: it is built for AArch64; this worker runs on x86-64") == true, "\(foreignExit)")
        #expect(try exit("e.missing").reason == .loadError)
        #expect(try exit("e.missing").message?.contains("e.missing/libTestKit.so") == true)
        let missingExit = try exit("e.missing"), caseExit = try exit("e.case")
        #expect(missingExit.message?.contains("there is no file libTestKit.so in the bundle: build the library and put it there") == true, "\(missingExit)")
        #expect(missingExit.message?.contains("the bundle's folder holds no library") == true, "\(missingExit)")
        #expect(caseExit.message?.contains("the bundle's folder holds libtestkit.so") == true, "\(caseExit)")
        #expect(st.first { $0.identifier == "e.fine" }?.state == "running")
    }
}

@Suite(.serialized, .timeLimit(.minutes(2)))
struct ControlBackPressureTests {
    /// A client that pipelines requests and reads none of the answers is not served past its
    /// answers' high-water mark; when it closes, what it left unread in the socket (which NIO
    /// reads at the end of the stream whatever the back-pressure) is dropped, not run for nobody.
    @Test("a client that reads no answers and closes: the requests it left unread are not run")
    func requestsOfAClientThatLeftAreNotRun() throws {
        let w = try TestWorld()
        try w.bundle("bp.one")
        // More plugins, for a metrics answer many times a request's size.
        for i in 0..<24 { try w.bundle("bp.more\(i)") }
        let sv = try RunningSupervisor(w)
        let conn = try rawControl(sv.socket)
        var first = FrameBuilder(kind: .call)
        first.uint("id", 1)
        first.string("target", "bp.one")
        first.string("method", "sleep")
        first.raw("params", Array(#"{"ms":60000}"#.utf8))
        try conn.sendFrame(first.finish())
        // Each pair: a metrics request (a large answer) and a 1 ms call (recorded by the plugin
        // when it runs), until the socket takes no more.
        var timeout = timeval(tv_sec: 1, tv_usec: 0)
        setsockopt(conn.fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        // One burst, as a client pipelining does: many frames to a write.
        var burst: [UInt8] = []
        for i in 0..<20_000 {
            var metrics = FrameBuilder(kind: .metrics)
            metrics.uint("id", UInt64(2 * i + 2))
            var call = FrameBuilder(kind: .call)
            call.uint("id", UInt64(2 * i + 3))
            call.string("target", "bp.one")
            call.string("method", "sleep")
            call.raw("params", Array(#"{"ms":1}"#.utf8))
            burst += metrics.finish() + call.finish()
        }
        let pairSize = burst.count / 20_000
        var sent = 0
        while sent < burst.count {
            let n = burst[sent...].withUnsafeBytes { send(conn.fd, $0.baseAddress, $0.count, 0) }
            guard n > 0 else { break }
            sent += n
        }
        let written = sent / pairSize
        conn.close()
        // Its first call is cancelled when the supervisor sees the connection end, after it has
        // read what was left in the socket.
        try sv.waitUntil("the closed client's call cancelled") { try sv.info("bp.one").events.contains { $0.event == "cancelled:60000" } }
        let ran = try sv.info("bp.one").events.filter { $0.event == "sleeping:1" }.count
        #expect(written > 1_000, "only \(written) requests went into the socket")
        #expect(ran < written / 2, "\(ran) of the \(written) calls ran for a client that read none of its answers and left")
        #expect(try sv.cli("status").code == 0)
    }

    @Test("a client that pipelines calls with large answers and reads none is dropped once 256 MiB of them wait for it (sixteen of the largest frames), not held in the supervisor's memory")
    func unreadAnswersHaveALimit() throws {
        let w = try TestWorld()
        try w.bundle("bp.echo")
        let sv = try RunningSupervisor(w)
        let conn = try rawControl(sv.socket)
        defer { conn.close() }
        var timeout = timeval(tv_sec: 1, tv_usec: 0)
        setsockopt(conn.fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        // Small requests, read at once (nothing is unread yet), each answered 2 MiB a second later:
        // the 256 served at once (`mostInFlight`) answer 512 MiB, twice the limit.
        for i in 0..<300 {
            var call = FrameBuilder(kind: .call)
            call.uint("id", UInt64(i + 1))
            call.string("target", "bp.echo")
            call.string("method", "text")
            call.raw("params", Array(#"{"size":2097152,"ms":1000}"#.utf8))
            try conn.sendFrame(call.finish())
        }
        // 512 MiB of answers made by a debug worker: a slow machine takes more than ten seconds.
        try sv.waitUntil(timeout: 90, "the client dropped") { sv.log.contains("dropping a control client that does not read its answers") }
        #expect(try rss(sv.pid) < 500 << 20)
        #expect(try sv.cli("metrics").out.contains(#"supervisor_control_clients_dropped_total{reason="unread"} 1"#))
        #expect(try sv.call("bp.echo", "echo", "[1]", as: [Int].self) == [1])
    }

    @Test("a stream read late at 5 MiB chunks (its whole window of 16, 80 MiB, waiting for the reader) is not dropped: every chunk arrives")
    func aLateStreamReaderIsNotDropped() throws {
        let w = try TestWorld()
        try w.bundle("bp.big")
        let sv = try RunningSupervisor(w)
        // The CLI writes each chunk to a pipe nobody reads for 3 s: it stops reading its socket.
        let size = 5 << 20
        let r = try Shell.run("/bin/sh", ["-c", "\"$0\" call --socket \"$1\" --stream --timeout 60000 bp.big blob '{\"count\":40,\"size\":\(size)}' | (sleep 3; wc -c)",
                                          Build.supervisor, sv.socket], timeout: 120)
        #expect(Int(r.out.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0 >= 40 * size, "\(r.out)\(r.err)")
        #expect(!sv.log.contains("dropping a control client"), "\(sv.log)")
    }

    @Test("a client that pipelines 1,000 calls with 100 KB answers and reads them slowly (100 MB in all, 25 MB a second) gets every answer: at most 256 of its requests wait for answers at once, the rest are read as answers leave")
    func aSlowReaderGetsEveryAnswer() throws {
        let w = try TestWorld()
        try w.bundle("bp.echo")
        let sv = try RunningSupervisor(w)
        let conn = try rawControl(sv.socket)
        defer { conn.close() }
        var burst: [UInt8] = []
        for i in 0..<1_000 {
            var call = FrameBuilder(kind: .call)
            call.uint("id", UInt64(i + 1))
            call.string("target", "bp.echo")
            call.string("method", "text")
            // Each answered after 200 ms: every request could be read before any answer is queued.
            call.raw("params", Array(#"{"size":100000,"ms":200}"#.utf8))
            burst += call.finish()
        }
        var sent = 0
        while sent < burst.count {
            let n = burst[sent...].withUnsafeBytes { send(conn.fd, $0.baseAddress, $0.count, 0) }
            guard n > 0 else { break }
            sent += n
        }
        #expect(sent == burst.count)
        var seen = Set<UInt64>()
        var peak = 0
        while seen.count < 1_000 {
            let answer = try CrashReplayTests.read(conn)
            #expect(answer.error == nil && answer.result?.count == 100_002, "\(answer.id): \(String(describing: answer.error))")
            seen.insert(answer.id)
            if seen.count % 100 == 0 { peak = max(peak, try rss(sv.pid)) }
            usleep(4_000)  // a slow reader
        }
        #expect(!sv.log.contains("dropping a control client"))
        #expect(peak < 200 << 20, "supervisor RSS \(peak >> 20) MiB")
    }

    @Test("300 stream calls on one connection (256 wait for answers at once): the chunks' credit and a cancel still go through while the rest wait, every stream ends")
    func streamsPastTheLimitStillMove() throws {
        let w = try TestWorld()
        try w.bundle("bp.kit", extra: ["limits": ["streamIdleTimeoutMs": 5000]])
        let sv = try RunningSupervisor(w)
        let conn = try rawControl(sv.socket)
        defer { conn.close() }
        var burst: [UInt8] = []
        for i in 1...300 {
            burst += [UInt8].frame(body: Array(#"{"type":"call","id":\#(i),"target":"bp.kit","method":"rows","params":{"count":40},"stream":true}"#.utf8))
        }
        // One more, cancelled while it waits: it never runs, and is not answered.
        burst += [UInt8].frame(body: Array(#"{"type":"call","id":999,"target":"bp.kit","method":"rows","params":{"count":40},"stream":true}"#.utf8))
        burst += [UInt8].frame(body: Array(#"{"type":"cancel","id":999}"#.utf8))
        var sent = 0
        while sent < burst.count {
            let n = burst[sent...].withUnsafeBytes { send(conn.fd, $0.baseAddress, $0.count, 0) }
            guard n > 0 else { break }
            sent += n
        }
        var chunks: [UInt64: Int] = [:]
        var ended = Set<UInt64>()
        while ended.count < 300 {
            let frame = try #require(try conn.receiveFrame())
            let (kind, id) = try frame.withUnsafeBytes { let e = try Envelope.parse($0); return (e.kind, e.id ?? 0) }
            if kind == .chunk {
                chunks[id, default: 0] += 1
                // Credit as a reader gives it: one chunk taken, one more allowed.
                try conn.sendFrame(StreamFrames.credit(id: id, n: 1, into: [UInt8]()))
            } else {
                #expect(!frame.withUnsafeBytes { String(decoding: $0, as: UTF8.self) }.contains("error"), "\(id): \(String(decoding: frame, as: UTF8.self))")
                #expect(id != 999, "the cancelled call was answered")
                ended.insert(id)
            }
        }
        #expect(chunks.values.allSatisfy { $0 == 40 } && chunks.count == 300, "\(chunks.count) streams")
        #expect(chunks[999] == nil)
    }
}
