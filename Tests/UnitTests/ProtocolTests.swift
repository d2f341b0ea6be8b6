import Foundation
import Glibc
import IPC
import LinuxSupport
import PluginProtocol
import Testing

@Suite struct JSONScannerTests {
    func envelope(_ s: String) throws -> Envelope {
        try Array(s.utf8).withUnsafeBytes { try Envelope.parse($0) }
    }

    /// The `type` of `s` as its envelope names it.
    func typeName(_ s: String) throws -> String? {
        try Array(s.utf8).withUnsafeBytes { try Envelope.parse($0).typeName(in: $0) }
    }

    @Test func routingFields() throws {
        let text = #"{"type":"call","id":42,"target":"a.b","method":"m\"x","params":{"deep":[1,2,{"k":null}]},"extra":true}"#
        let bytes = Array(text.utf8)
        try bytes.withUnsafeBytes { raw in
            let env = try Envelope.parse(raw)
            #expect(env.kind == .call)
            #expect(env.id == 42)
            #expect(Envelope.string(raw, env.target) == "a.b")
            #expect(Envelope.string(raw, env.method) == "m\"x")
            #expect(String(decoding: raw[env.params!], as: UTF8.self) == #"{"deep":[1,2,{"k":null}]}"#)
        }
    }

    @Test("ids up to UInt64's largest decode, 19 digits without a check per digit, 20 with one; one more is no id; every length is written back as it was")
    func idDigits() throws {
        #expect(try envelope(#"{"id":9999999999999999999}"#).id == 9_999_999_999_999_999_999)
        #expect(try envelope(#"{"id":1152921504606846977}"#).id == 1_152_921_504_606_846_977)
        #expect(try envelope(#"{"id":18446744073709551615}"#).id == UInt64.max)
        let over = try envelope(#"{"id":18446744073709551616}"#)
        #expect(over.id == nil && over.badID)
        #expect(try envelope(#"{"id":0}"#).id == 0)
        // Written two digits at a time: every length from 1 to 20 digits, and each edge of a pair.
        var values: [UInt64] = [0, 9, 10, 11, 99, 100, 101, 999, 1000, 1 << 61, UInt64.max, UInt64.max - 1]
        var power: UInt64 = 1
        for _ in 0..<19 {
            values += [power - 1, power, power + 1]
            power *= 10
        }
        for value in values {
            var frame = FrameBuilder(kind: .reply)
            frame.uint("id", value)
            frame.int("n", -Int(value % 1000))
            frame.string("k", "v\u{1}\"")
            let bytes = frame.finish()
            #expect(Array(bytes.dropFirst(Frame.headerSize)) == Array(#"{"type":"reply","id":\#(value),"n":\#(-Int(value % 1000)),"k":"v\u0001\""}"#.utf8))
            #expect(try bytes.dropFirst(Frame.headerSize).withUnsafeBytes { try Envelope.parse($0).id } == value)
            #expect(try Frame.bodyLength(b0: bytes[0], b1: bytes[1], b2: bytes[2], b3: bytes[3], limit: 1 << 20) == bytes.count - Frame.headerSize)
        }
    }

    @Test("every kind is told from its type, whether read from the bytes (the call path's kinds) or decoded (escapes, the others); an unknown type keeps its name")
    func typesAndTheirNames() throws {
        for kind in MessageKind.allCases {
            let text = #"{"type":"\#(kind.rawValue)","id":1}"#
            #expect(try envelope(text).kind == kind && typeName(text) == kind.rawValue)
            // Every frame built starts with the kind's constant opening, its name as the wire has it.
            var frame = FrameBuilder(kind: kind)
            frame.uint("id", 1)
            #expect(Array(frame.finish().dropFirst(Frame.headerSize)) == Array(#"{"type":"\#(kind.rawValue)","id":1}"#.utf8))
        }
        #expect(try envelope(#"{"type":"re\u0070ly"}"#).kind == .reply)
        #expect(try typeName(#"{"type":"c\u0061ll"}"#) == "call")
        #expect(try envelope(#"{"type":"calls"}"#).kind == nil && typeName(#"{"type":"calls"}"#) == "calls")
        #expect(try envelope(#"{"type":7}"#).kind == nil)
        #expect(try typeName(#"{"id":1}"#) == nil && typeName(#"{"type":7}"#) == nil)
    }

    @Test(arguments: [
        #"{"type":"call""#, #"{"type":"call",}"#, #"{"id":01}"#, "[1]", #"{"a":tru}"#, #"{"a":"\x"}"#,
        #"{"a":1} x"#, "", #"{"a":"line"# + "\n" + #""}"#, #"{"a":-}"#, #"{"a":1.}"#, #"{"a":1e}"#,
    ])
    func rejectsMalformed(_ text: String) {
        #expect(throws: JSONScanner.Failure.self) { try envelope(text) }
    }

    @Test func depthLimit() throws {
        let ok = "{\"a\":" + String(repeating: "[", count: 63) + String(repeating: "]", count: 63) + "}"
        _ = try envelope(ok)
        let deep = "{\"a\":" + String(repeating: "[", count: 64) + String(repeating: "]", count: 64) + "}"
        #expect(throws: JSONScanner.Failure.tooDeep(limit: 64)) { try envelope(deep) }
    }

    @Test func idMustBeUnsigned() throws {
        #expect(try envelope(#"{"type":"reply","id":-1}"#).badID)
        #expect(try envelope(#"{"type":"reply","id":1.5}"#).badID)
        #expect(try envelope(#"{"type":"reply","id":18446744073709551615}"#).id == UInt64.max)
        #expect(try envelope(#"{"type":"reply","id":18446744073709551616}"#).badID)
    }

    @Test func unicodeEscapes() throws {
        let text = #"{"type":"log","name":"\u00e9\ud83d\ude00\n"}"#
        try Array(text.utf8).withUnsafeBytes { raw in
            let env = try Envelope.parse(raw)
            #expect(Envelope.string(raw, env.name) == "é😀\n")
        }
    }

    @Test func builderRoundTrip() throws {
        var b = FrameBuilder(kind: .reply)
        b.uint("id", 1234567890123)
        b.string("name", "quote\" back\\ nl\n ctl\u{1}")
        b.error(.timeout, "late")
        let frame = b.finish()
        #expect(Int(frame[3]) + Int(frame[2]) << 8 == frame.count - 4)
        try frame[4...].withUnsafeBytes { raw in
            let env = try Envelope.parse(raw)
            #expect(env.kind == .reply)
            #expect(env.id == 1234567890123)
            #expect(Envelope.string(raw, env.name) == "quote\" back\\ nl\n ctl\u{1}")
            let e = try ProtocolJSON.decode(ErrorBody.self, from: UnsafeRawBufferPointer(rebasing: raw[env.error!]))
            #expect(e == ErrorBody(.timeout, "late"))
        }
    }

    /// The worker writes `hello` by hand (HelloMessage.frame); the supervisor decodes it as Codable.
    @Test func helloWrittenByHandDecodes() throws {
        let full = HelloMessage(abi: 1, pid: 4_000_000, plugin: "com.example.q\"uote", version: "1.2.3-beta+é",
                                sandbox: ["seccomp", "landlock"], sandboxMissing: ["cgroup: no \"group\"\nhere", "é\u{1}"],
                                timings: ["loadUs": 912, "sandbox.specUs": 0, "startedAtUs": 9_123_456_789_012, "skewUs": -42, "lowest": Int.min])
        let bare = HelloMessage(abi: 1, pid: 7, plugin: "p", version: "0.1.0", sandbox: [], sandboxMissing: nil, timings: [:])
        for hello in [full, bare] {
            let frame = hello.frame()
            #expect(Int(frame[3]) + Int(frame[2]) << 8 == frame.count - 4)
            let decoded = try frame[4...].withUnsafeBytes { try ProtocolJSON.decode(HelloMessage.self, from: $0) }
            #expect(decoded == hello)
            let env = try frame[4...].withUnsafeBytes { try Envelope.parse($0) }
            #expect(env.kind == .hello)
        }
    }
}

@Suite struct FrameDecoderTests {
    @Test func splitsAcrossReads() throws {
        var d = FrameDecoder(maxBody: 100)
        let frames = [UInt8].frame(body: Array("{\"a\":1}".utf8)) + [UInt8].frame(body: Array("{}".utf8))
        var got: [String] = []
        for byte in frames {
            [byte].withUnsafeBytes { d.append($0) }
            while let s = try d.next({ String(decoding: $0, as: UTF8.self) }) { got.append(s) }
        }
        #expect(got == ["{\"a\":1}", "{}"])
        #expect(d.state == .waitingForHeader)
    }

    @Test func refusesEmptyAndOversized() {
        var d = FrameDecoder(maxBody: 10)
        ([0, 0, 0, 0] as [UInt8]).withUnsafeBytes { d.append($0) }
        #expect(throws: Frame.HeaderError.empty) { try d.next { _ in () } }
        var e = FrameDecoder(maxBody: 10)
        ([0, 0, 0, 11] as [UInt8]).withUnsafeBytes { e.append($0) }
        #expect(throws: Frame.HeaderError.tooLarge(length: 11, limit: 10)) { try e.next { _ in () } }
    }
}

@Suite struct PluginURITests {
    @Test func parses() throws {
        let uri = try #require(PluginURI("plugin://com.example.greeter/hello/there?name=Ada%20L&x=a+b&flag"))
        #expect(uri.identifier == "com.example.greeter")
        #expect(uri.path == "/hello/there")
        #expect(uri.queryItems == ["name": "Ada L", "x": "a b", "flag": ""])
        #expect(PluginURI("plugin://a.b")?.path == "/")
        #expect(PluginURI("http://a.b/x") == nil)
        #expect(PluginURI("plugin://bad id/x") == nil)
        #expect(PluginURI("plugin:///x") == nil)
    }
}

/// The poll-before-sleeping window (`workerSpinMicroseconds`): it follows how long waits turn out.
@Suite struct SpinWindowTests {
    @Test func followsTheWaits() {
        var w = SpinWindow(maxNanoseconds: 100_000)
        #expect(w.currentNanoseconds == 100_000)
        // Waits longer than the maximum halve it, down to nothing below the floor.
        var seen: [Int] = []
        for _ in 0..<6 { w.slept(waited: 1_000_000); seen.append(w.currentNanoseconds) }
        #expect(seen == [50_000, 25_000, 12_500, 6_250, 0, 0])
        // A short wait starts it again from the floor and doubles it up to the maximum.
        seen = []
        for _ in 0..<7 { w.slept(waited: 40_000); seen.append(w.currentNanoseconds) }
        #expect(seen == [SpinWindow.floor, 10_000, 20_000, 40_000, 80_000, 100_000, 100_000])
        // Off: never polls, whatever the waits.
        var off = SpinWindow(maxNanoseconds: 0)
        off.slept(waited: 10)
        #expect(off.currentNanoseconds == 0)
    }

    /// A reader that polls gets every frame, whether it comes while it polls, after it has gone to
    /// sleep, or split across both; the end of the stream ends it.
    @Test func pollingReaderLosesNothing() throws {
        var fds: [Int32] = [0, 0]
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0)
        let reader = BlockingConnection(fd: fds[0])
        reader.pollBeforeSleeping(microseconds: 200)
        let writer = BlockingConnection(fd: fds[1])
        let frames = (0..<200).map { i in [UInt8].frame(body: Array("{\"n\":\(i)}".utf8)) }
        let sender = Thread {
            for (i, frame) in frames.enumerated() {
                // Some back to back, some after the reader's window has run out, one split in two.
                if i % 50 == 49 { usleep(2_000) }
                if i == 100 {
                    try? writer.sendFrame(Array(frame[0..<3]))
                    usleep(1_000)
                    try? writer.sendFrame(Array(frame[3...]))
                } else {
                    try? writer.sendFrame(frame)
                }
            }
            writer.shutdown()
        }
        sender.start()
        var got: [String] = []
        while let body = try reader.receive({ String(decoding: $0, as: UTF8.self) }) { got.append(body) }
        #expect(got == (0..<200).map { "{\"n\":\($0)}" })
    }

    /// The worker's reading thread holds what it writes while it delivers the frames of one read,
    /// and sends it in one write before it reads again; another thread's frame goes out at once,
    /// after the held ones; the end of the stream sends what is held.
    @Test func heldWritesGoOutTogetherInOrder() throws {
        let (worker, peer) = try HeldPair.make(limit: 60_000_000_000)
        // Five requests in one write: five replies (echoes), held until the reader reads again.
        try peer.send((0..<5).flatMap { [UInt8].frame(body: HeldPair.body($0)) })
        for _ in 0..<5 { _ = try worker.receive { request in try worker.sendBody(request) } }
        #expect(peer.waiting().isEmpty, "the reader's replies went out before it read again")
        // Another thread's frame sends the held ones first, in the same write, in order.
        let other = Thread { try? worker.sendFrame([UInt8].frame(body: HeldPair.body(99))) }
        other.start()
        peer.awaitReadable()
        #expect(peer.waiting() == (0..<5).map { HeldPair.text($0) } + [HeldPair.text(99)])
        // The end of the stream: what is held goes out before the reader's last read.
        try peer.send([UInt8].frame(body: HeldPair.body(7)))
        _ = try worker.receive { request in try worker.sendBody(request) }
        peer.endWriting()
        #expect(try worker.receive({ _ in true }) == nil)
        #expect(peer.waiting() == [HeldPair.text(7)])
    }

    /// A held reply waits at most the limit: the next delivery of the same read sends it first.
    @Test func heldWritesWaitAtMostTheLimit() throws {
        let (worker, peer) = try HeldPair.make(limit: 1_000)
        try peer.send([UInt8].frame(body: HeldPair.body(5)) + [UInt8].frame(body: HeldPair.body(6)))
        _ = try worker.receive { request in
            try worker.sendBody(request)
            usleep(2_000)  // a slow handler: longer than the limit
        }
        var atSecond: [String] = []
        _ = try worker.receive { _ in atSecond = peer.waiting() }
        #expect(atSecond == [HeldPair.text(5)])
    }
}

/// `FileSystem.makeDirectories`: mkdir -p, from the folder upwards.
@Suite struct MakeDirectoriesTests {
    @Test func makesWhatIsMissingAndAcceptsWhatIsThere() throws {
        let root = NSTemporaryDirectory() + "/mkdirs-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        defer { try? FileManager.default.removeItem(atPath: root) }
        // Four levels missing, then all there, then one more level, with a trailing slash.
        try FileSystem.makeDirectories(root + "/a/b/c")
        #expect(FileSystem.isDirectory(root + "/a/b/c"))
        try FileSystem.makeDirectories(root + "/a/b/c")
        try FileSystem.makeDirectories(root + "//a/b/c/d/")
        #expect(FileSystem.isDirectory(root + "/a/b/c/d"))
        // The mode applies to what it makes.
        var st = stat()
        #expect(stat(root + "/a/b", &st) == 0 && st.st_mode & 0o777 == 0o700)
        // A file in the way: the error names the folder and the reason.
        #expect(FileManager.default.createFile(atPath: root + "/file", contents: Data()))
        #expect(throws: SystemError.self) { try FileSystem.makeDirectories(root + "/file/sub/deeper") }
        do {
            try FileSystem.makeDirectories(root + "/file/sub")
            Issue.record("no error for a folder under a file")
        } catch {
            #expect("\(error)".contains(root + "/file/sub") && error.errno == ENOTDIR, "\(error)")
        }
    }
}

/// The raw peer of a worker-side connection that holds its reading thread's writes.
final class HeldPair {
    let fd: Int32

    init(fd: Int32) { self.fd = fd }
    deinit { close(fd) }

    static func body(_ i: Int) -> [UInt8] { Array(text(i).utf8) }
    static func text(_ i: Int) -> String { "{\"n\":\(i)}" }

    /// The worker's connection (holding the calling thread's writes up to `limit` ns) and its peer.
    static func make(limit: Int64) throws -> (BlockingConnection, HeldPair) {
        var fds: [Int32] = [0, 0]
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) == 0)
        let worker = BlockingConnection(fd: fds[0])
        worker.holdWritesWhileDelivering(atMostNanoseconds: limit)
        return (worker, HeldPair(fd: fds[1]))
    }

    func send(_ bytes: [UInt8]) throws {
        #expect(bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) } == bytes.count)
    }

    /// Waits (up to 10 s) until something can be read.
    func awaitReadable() {
        var ready = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        _ = poll(&ready, 1, 10_000)
    }

    func endWriting() { _ = shutdown(fd, Int32(SHUT_WR)) }

    /// The frame bodies that can be read without waiting.
    func waiting() -> [String] {
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = recv(fd, &chunk, chunk.count, Int32(MSG_DONTWAIT))
            if n <= 0 { break }
            bytes += chunk[0..<n]
        }
        var decoder = FrameDecoder(maxBody: 1 << 20)
        bytes.withUnsafeBytes { decoder.append($0) }
        var bodies: [String] = []
        while let b = try? decoder.next({ String(decoding: $0, as: UTF8.self) }) { bodies.append(b) }
        return bodies
    }
}

/// The worker reads its spec by hand (WorkerSpec(reading:)); the supervisor writes it with
/// ProtocolJSON. Both must agree on every field.
@Suite struct WorkerSpecReadingTests {
    func read(_ text: String) throws(WorkerSpec.ReadingError) -> WorkerSpec {
        try WorkerSpec(reading: Array(text.utf8))
    }

    func roundTrip(_ spec: WorkerSpec) throws {
        let encoded = try ProtocolJSON.encode(spec)
        let byHand = try WorkerSpec(reading: encoded)
        #expect(byHand == spec)
        #expect(byHand == (try ProtocolJSON.decode(WorkerSpec.self, from: encoded)))
    }

    @Test func everyFieldAsTheSupervisorWritesIt() throws {
        var full = WorkerSpec(identifier: "com.example.q\"uote", version: "1.2.3-beta+é", bundle: "/b/with space/é", library: "/b/lib.so",
                              dataDirectory: "/h/data/x", liveDirectory: "/h/live/x", tempDirectory: "/h/tmp/x@3", supervisorPID: 4_000_000,
                              socketFD: 3, uid: 4_294_967_294, gid: 0, descriptorChannelFD: 4, maxFrameBytes: 16 << 20,
                              sandbox: SandboxSpec(enabled: true, memoryMB: 96, openFiles: 256,
                                                   permissions: [.network, .read("/srv/a b"), .write("/srv/w")],
                                                   required: [.landlock, .seccomp], runtimePaths: ["/opt/swift/usr/lib/swift/linux"],
                                                   debuggable: true, seccompProgram: Data((0..<2400).map { UInt8($0 % 251) })))
        full.cgroupProcs = ["/sys/fs/cgroup/memory/a/cgroup.procs", "/sys/fs/cgroup/pids/a/cgroup.procs"]
        full.cgroupTasks = ["/sys/fs/cgroup/memory/a/tasks"]
        full.cgroupMissing = "no \"group\"\nhere\u{1}"
        full.cgroupFolders = ["/sys/fs/cgroup/cpu/a", "/sys/fs/cgroup/memory/a"]
        full.cgroupBySupervisor = false
        full.maxJSONDepth = 32
        full.peerLinks = true
        full.spinMicroseconds = 100
        full.standby = true
        full.hostNetworkNamespace = 4_026_531_840
        full.maxPayloadBytes = 8 << 20
        try roundTrip(full)
        // Only what is required.
        try roundTrip(WorkerSpec(identifier: "p", version: "0.1.0", bundle: "/b", library: "/b/l.so", dataDirectory: "/d", supervisorPID: 1,
                                 sandbox: SandboxSpec(enabled: false)))
    }

    @Test func unknownMembersAreSkippedAndNullIsAbsent() throws {
        let spec = try read(#"{"identifier":"p","version":"1","bundle":"/b","library":"/l","dataDirectory":"/d","supervisorPID":7,"#
            + #""socketFD":3,"maxFrameBytes":1024,"liveDirectory":null,"fromTheFuture":{"a":[1,{"b":null}]},"#
            + #""sandbox":{"enabled":true,"permissions":[],"required":[],"runtimePaths":[],"later":true}}"#)
        #expect(spec.identifier == "p" && spec.liveDirectory == nil && spec.supervisorPID == 7 && spec.sandbox.enabled)
    }

    @Test func badSpecsNameTheMember() {
        let base = #""identifier":"p","version":"1","bundle":"/b","library":"/l","dataDirectory":"/d","supervisorPID":7,"socketFD":3,"maxFrameBytes":1024"#
        let sandbox = #""sandbox":{"enabled":true,"permissions":[],"required":[],"runtimePaths":[]}"#
        let cases: [(String, String)] = [
            ("{\(base)}", "has no sandbox"),
            (#"{"version":"1"}"#, "has no identifier"),
            ("{\(base),\(sandbox.replacingOccurrences(of: #""enabled":true"#, with: #""enabled":1"#))}", "enabled is not true or false"),
            ("{\(base.replacingOccurrences(of: #""socketFD":3"#, with: #""socketFD":4294967296"#)),\(sandbox)}", "socketFD is not a 32-bit integer"),
            ("{\(base.replacingOccurrences(of: #""identifier":"p""#, with: #""identifier":5"#)),\(sandbox)}", "identifier is not a string"),
            ("{\(base),\"hostNetworkNamespace\":-1,\(sandbox)}", "hostNetworkNamespace is not an unsigned integer"),
            ("{\(base),\(sandbox.replacingOccurrences(of: #""permissions":[]"#, with: #""permissions":["root"]"#))}", "unknown permission 'root'"),
            ("{\(base),\(sandbox.replacingOccurrences(of: #""required":[]"#, with: #""required":["moat"]"#))}", "unknown layer 'moat'"),
            ("{\(base),\(sandbox.replacingOccurrences(of: #""runtimePaths":[]"#, with: #""runtimePaths":"/x""#))}", "runtimePaths is not an array of strings"),
            ("{\(base),\(sandbox.replacingOccurrences(of: "}", with: #","seccompProgram":"!!"}"#))}", "seccompProgram is not base64"),
            ("{\(base),\(sandbox)", "not a valid JSON object"),
            ("[]", "not a valid JSON object"),
        ]
        for (text, reason) in cases {
            do {
                _ = try read(text)
                Issue.record("accepted: \(text)")
            } catch {
                #expect(error.description.contains(reason), "\(text): \(error)")
            }
        }
    }
}
