import CLinuxSupport
import CPluginABI
import Foundation
import IPC
import Logging
import PluginHost
import PluginProtocol
import Protocol
import SupervisorClient
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Raw bytes (SPEC §13, docs/protocol.md "Bytes"): inline up to 64 KiB, above that a sealed memfd
/// the supervisor passes on without reading, to the CLI (`--output`), a `SupervisorClient` and an
/// embedded host; and every way a plugin can break the rules of descriptors.
@Suite(.serialized, .timeLimit(.minutes(3)))
struct BytesTests {
    struct Size: Encodable, Sendable { var size: Int }

    /// The memfds of bytes (`sp-bytes`) process `pid` has open.
    static func openMemfds(_ pid: Int32) throws -> Int {
        try FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").filter { fd in
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\(fd)"))?.hasPrefix("/memfd:sp-bytes") == true
        }.count
    }

    /// TestKit's pattern: byte i is i % 251.
    static func pattern(_ count: Int) -> [UInt8] { (0..<count).map { UInt8($0 % 251) } }

    @Test("supervisor call --output writes a Swift and a C plugin's bytes to a file, inline (1 KiB) and as a sealed memfd (3 MB, 5 MB); a client and an embedded host get the same bytes, and an embedded host sends its own (1.2 MB); the supervisor holds no descriptor afterwards")
    func toProgramsAndFiles() async throws {
        let w = try TestWorld()
        try w.bundle("b.kit")
        try w.bundle("b.c", library: try Build.cHello())
        let sup = try RunningSupervisor(w)
        let fdsBefore = try openFDs(sup.pid)
        // Without --output the bytes cannot print: the CLI says where they can go.
        let printed = try sup.cli("call", "b.c", "bytes", #"{"n":100}"#)
        #expect(printed.code == 0 && printed.err.contains("the answer is raw bytes; give --output FILE to write them"), "\(printed.out) \(printed.err)")
        for (id, method, params, count) in [("b.kit", "bytes", #"{"size":1000}"#, 1000), ("b.kit", "bytes", #"{"size":3000000}"#, 3_000_000),
                                            ("b.c", "bytes", #"{"n":5000000}"#, 5_000_000), ("b.c", "bytes", #"{"n":100}"#, 100)] {
            let out = w.root + "/\(id)-\(count).bin"
            let r = try sup.cli("call", "--output", out, id, method, params)
            #expect(r.code == 0 && r.out.contains(#""bytes":\#(count)"#), "\(id) \(count): \(r.err)")
            let data: [UInt8] = try [UInt8](Data(contentsOf: URL(fileURLWithPath: out)))
            let expected: [UInt8] = id == "b.kit" ? Self.pattern(count) : (0..<count).map { UInt8(ascii: "a") + UInt8($0 % 26) }
            #expect(data == expected, "\(id): \(data.count) bytes")
        }
        let client = try await SupervisorClient.connect(socket: sup.socket)
        let small = try await client.callBytes("b.kit", "bytes", Size(size: 10))
        #expect(try small.copy() == Self.pattern(10))
        let big = try await client.callBytes("b.kit", "bytes", Size(size: 2_000_000))
        guard case .descriptor(let fd, let length) = big else { Issue.record("2 MB came inline"); return }
        #expect(length == 2_000_000 && sp_bytes_check(fd, 2_000_000) == 0)
        #expect(try big.copy() == Self.pattern(2_000_000))
        big.close()
        client.close()
        // A plain call of a bytes method shows the placeholder and takes none of the bytes: no
        // descriptor stays open in this process (the supervisor closes the unredeemed ones).
        let plain = try await SupervisorClient.connect(socket: sup.socket, directLinks: false)
        // (Memfds only: the other suites running meanwhile open sockets of their own in this process.)
        let mine = try Self.openMemfds(getpid())
        for _ in 0..<5 {
            let answer = try await plain.callJSON("b.kit", "bytes", params: Array(#"{"size":200000}"#.utf8))
            #expect(answer == Array(#"{"$bytes":0}"#.utf8))
        }
        #expect(try Self.openMemfds(getpid()) <= mine)
        // Left uncollected, one client's answers hold at most `offersPerClient` memfds (and the
        // answering plugin's memory): past that, its oldest go.
        for _ in 0..<70 { _ = try await plain.callJSON("b.kit", "bytes", params: Array(#"{"size":100000}"#.utf8)) }
        let held = try openFDs(sup.pid)
        #expect(held <= fdsBefore + 64 + 8, "\(held) descriptors, \(fdsBefore) before")
        plain.close()
        // Every descriptor it took was handed on and closed: tokens picked up, or withdrawn when
        // their client went away (not held for the tokens' 10 s).
        try sup.waitUntil(timeout: 3, "the supervisor's descriptors back where they were") { try openFDs(sup.pid) <= fdsBefore }
        sup.signal(SIGTERM)
        _ = try sup.waitForExit()

        let (host, running) = try await HostTests.start(w)
        let hosted = try await host.callBytes("b.kit", "bytes", Size(size: 1_500_000))
        #expect(try hosted.copy() == Self.pattern(1_500_000))
        hosted.close()
        let inline = try await host.callBytes("b.c", "bytes", ["n": 26])
        #expect(try inline.copy() == [UInt8]("abcdefghijklmnopqrstuvwxyz".utf8))
        // And bytes into a plugin: the program's memfd handed over in the process (it keeps its own).
        let sending = try AttachedBytes.from(Self.pattern(1_200_000))
        let digest = try await host.call("b.kit", "digest", ["data": ["$bytes": 0]], sending: [sending], as: Digest.self)
        #expect(digest == Self.digest(Self.pattern(1_200_000)))
        #expect(sp_bytes_check(Int32(truncatingIfNeeded: { if case .descriptor(let fd, _) = sending { return Int(fd) } else { return -1 } }()), 1_200_000) == 0)
        sending.close()
        let echoed = try await host.call("b.c", "digest", ["data": ["$bytes": 0]], sending: [.inline([7, 8])], as: CDigest.self)
        #expect(echoed == CDigest(length: 2, sum: 15))
        await host.shutdown()
        try await running.value
    }

    @Test("a plugin that sends an unsealed or writable memfd, a socket, a memfd of another length, more descriptors than its message announces, or announces one that never comes, is ended alone as a protocol violation; what it sent is closed, and the others run on")
    func hostileDescriptors() throws {
        let w = try TestWorld()
        let lib = try SandboxTests.hostileLibrary()
        let attacks = ["bytesUnsealed", "bytesWritable", "bytesSocket", "bytesLength", "bytesMore", "bytesMissing"]
        for name in attacks { try w.bundle("b.\(name.lowercased())", library: lib, extra: ["restart": "never"]) }
        try w.bundle("b.kit")
        let sup = try RunningSupervisor(w)
        let fdsBefore = try openFDs(sup.pid)
        for name in attacks {
            let id = "b.\(name.lowercased())"
            let r = try sup.cli("call", "--timeout", "5000", "--output", w.root + "/x.bin", id, name)
            #expect(r.code != 0 && r.err.contains("unavailable"), "\(id): \(r.out) \(r.err)")
            try sup.waitUntil("\(id) ended") { try sup.plugin(id).lastExit != nil }
            let exit = try #require(try sup.plugin(id).lastExit)
            #expect(exit.reason == .protocolViolation, "\(id): \(exit)")
        }
        let reasons = try attacks.map { try sup.plugin("b.\($0.lowercased())").lastExit?.message ?? "" }
        #expect(reasons[0].contains("not sealed") && reasons[1].contains("not sealed"), "\(reasons)")
        #expect(reasons[2].contains("not a memfd"), "\(reasons[2])")
        #expect(reasons[3].contains("not of the announced 8192 bytes"), "\(reasons[3])")
        #expect(reasons[4].contains("1 descriptors announced, 2 came"), "\(reasons[4])")
        #expect(reasons[5].contains("none came"), "\(reasons[5])")
        #expect(try sup.plugin("b.kit").state == "running")
        #expect(try sup.cli("call", "--output", w.root + "/ok.bin", "b.kit", "bytes", #"{"size":100000}"#).code == 0)
        // Nothing they sent is left open in the supervisor (a worker's leftover message on its
        // channel closes with the channel when it ends).
        try sup.waitUntil("the supervisor's descriptors back where they were") { try openFDs(sup.pid) <= fdsBefore }
    }

    @Test("bytes into plugins: a plugin takes bytes as a parameter and hands a memfd it received on to another plugin's parameter (64 KiB and 64 KiB + 1 byte, 3 MB: through the supervisor as calls, over the peer link as answers; and 1 KB inline); nothing stays open in the supervisor")
    func intoPlugins() throws {
        let w = try TestWorld()
        try w.bundle("b.callee")
        try w.bundle("b.caller", deps: [Dep("b.callee")])
        let sup = try RunningSupervisor(w)
        let fdsBefore = try openFDs(sup.pid)
        for size in [1000, 3_000_000, 65_536, 65_537] {
            let r = try sup.cli("call", "b.caller", "bytesRelay", #"{"target":"b.callee","size":\#(size)}"#)
            #expect(r.code == 0, "\(size): \(r.err)")
            let digests = try JSONDecoder().decode([Digest].self, from: Data(r.out.utf8))
            let sum = (0..<size).reduce(UInt64(0)) { $0 + UInt64($1 % 251) }
            #expect(digests == [Digest(count: size, sum: sum, pattern: true), Digest(count: size, sum: sum, pattern: true)], "\(size): \(r.out)")
        }
        // But for the peer link made on the way, which holds one while it lasts (its mark's witness,
        // docs/protocol.md "Calls that survive a crash").
        try sup.waitUntil("the supervisor's descriptors back where they were") {
            try openFDs(sup.pid) <= fdsBefore + (sup.plugin("b.caller").links?.count ?? 0)
        }
    }

    struct Digest: Codable, Equatable { var count: Int; var sum: UInt64; var pattern: Bool }

    @Test("a worker without the sandbox (--no-sandbox) passes bytes over 64 KiB both ways too: its payload channel does not depend on the sandbox's descriptor channel")
    func withoutTheSandbox() throws {
        let w = try TestWorld()
        try w.bundle("b.kit")
        let sup = try RunningSupervisor(w, args: ["--no-sandbox"])
        let out = w.root + "/out.bin"
        let r = try sup.cli("call", "--output", out, "b.kit", "bytes", #"{"size":3000000}"#)
        #expect(r.code == 0 && (try? Data(contentsOf: URL(fileURLWithPath: out))) == Data(Self.pattern(3_000_000)), "\(r.err)")
        let echo = w.root + "/echo.bin"
        let e = try sup.cli("call", "--input", out, "--output", echo, "b.kit", "echoBytes")
        #expect(e.code == 0 && (try? Data(contentsOf: URL(fileURLWithPath: echo))) == Data(Self.pattern(3_000_000)), "\(e.err)")
    }
    struct CDigest: Codable, Equatable { var length: Int; var sum: UInt64 }

    static func digest(_ bytes: [UInt8]) -> Digest {
        Digest(count: bytes.count, sum: bytes.reduce(0) { $0 + UInt64($1) }, pattern: bytes.enumerated().allSatisfy { $0.element == UInt8($0.offset % 251) })
    }

    @Test("bytes from programs into plugins: supervisor call --input FILE (1 KB inline, 3 MB as a memfd) to a Swift and a C plugin, a SupervisorClient's call sending bytes; bad hand-ins (unsealed, a socket, another length, over maxPayloadMB, two descriptors) and unknown tokens are refused naming why; nothing stays open")
    func fromPrograms() async throws {
        let w = try TestWorld()
        try w.bundle("b.kit")
        try w.bundle("b.c", library: try Build.cHello())
        try #"{"maxPayloadMB": 8}"#.write(toFile: w.root + "/config.json", atomically: true, encoding: .utf8)
        // Started with 4,096 descriptors (its two plugins need fewer, so it keeps that): the
        // hand-ins that may wait are a quarter of them, 1,024, put in well within their 10 s.
        var inherited = rlimit()
        getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &inherited)
        var lowered = inherited
        lowered.rlim_cur = min(inherited.rlim_max, 4_096)
        setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &lowered)
        let started = Result { try RunningSupervisor(w, args: ["--config", w.root + "/config.json"]) }
        setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &inherited)
        let sup = try started.get()
        let fdsBefore = try openFDs(sup.pid)
        for size in [1000, 3_000_000] {
            let data = Self.pattern(size)
            let file = w.root + "/in-\(size).bin"
            try Data(data).write(to: URL(fileURLWithPath: file))
            let kit = try sup.cli("call", "--input", file, "b.kit", "digest")
            #expect(kit.code == 0, "\(size): \(kit.err)")
            #expect(try JSONDecoder().decode(Digest.self, from: Data(kit.out.utf8)) == Self.digest(data), "\(kit.out)")
            let c = try sup.cli("call", "--input", file, "b.c", "digest")
            #expect(c.code == 0, "\(size): \(c.err)")
            #expect(try JSONDecoder().decode(CDigest.self, from: Data(c.out.utf8)) == CDigest(length: size, sum: Self.digest(data).sum), "\(c.out)")
            // In and out in one call: the bytes come back as they went.
            let out = w.root + "/echo-\(size).bin"
            let echo = try sup.cli("call", "--input", file, "--output", out, "b.kit", "echoBytes")
            #expect(echo.code == 0 && (try? Data(contentsOf: URL(fileURLWithPath: out))) == Data(data), "\(size): \(echo.err)")
        }
        let tooBig = w.root + "/big.bin"
        try Data(count: 9 << 20).write(to: URL(fileURLWithPath: tooBig))
        let refused = try sup.cli("call", "--input", tooBig, "b.kit", "digest")
        #expect(refused.code != 0 && refused.err.contains("maxPayloadMB"), "\(refused.err)")
        let missing = try sup.cli("call", "--input", w.root + "/nothing.bin", "b.kit", "digest")
        #expect(missing.code == 64 && missing.err.contains("nothing.bin"), "\(missing.err)")
        // The C example takes only the one attachment its params name: another index is refused.
        let direct = try rawControl(sup.socket)
        try direct.sendFrame([UInt8].frame(body: Array(#"{"type":"call","id":1,"target":"b.c","method":"digest","params":{"data":{"$bytes":5}},"attachments":[{"length":3}]}"#.utf8) + [0] + Array("abc".utf8)))
        let wrongIndex = String(decoding: try #require(try direct.receiveFrame()), as: UTF8.self)
        #expect(wrongIndex.contains("badRequest") && wrongIndex.contains("the one attachment"), "\(wrongIndex)")
        direct.close()

        let client = try await SupervisorClient.connect(socket: sup.socket)
        let big = try AttachedBytes.from(Self.pattern(2_000_000))
        defer { big.close() }
        struct DigestParams: Encodable { var data: [String: Int] }
        let got = try await client.call("b.kit", "digest", DigestParams(data: ["$bytes": 0]), sending: [big], as: Digest.self)
        #expect(got == Self.digest(Self.pattern(2_000_000)))
        let small = try await client.call("b.c", "digest", DigestParams(data: ["$bytes": 0]), sending: [.inline([1, 2, 3])], as: CDigest.self)
        #expect(small == CDigest(length: 3, sum: 6))
        // A token nobody handed in.
        do {
            let none = try await client.callJSON("b.kit", "digest", params: Array(#"{"data":{"$bytes":0}}"#.utf8), sending: [])
            Issue.record("a call naming no bytes answered \(none)")
        } catch let error as ErrorBody {
            #expect(error.code == ErrorCode.badRequest.rawValue || error.code == ErrorCode.pluginError.rawValue, "\(error)")
        }
        client.close()

        // Hand-ins that break the rules, straight at the handoff socket.
        let handoff = sup.socket + ".links"
        func put(_ fd: Int32, _ length: Int, extra: Int32? = nil) throws -> String {
            let connection = try BlockingConnection.connect(path: handoff)
            defer { connection.close() }
            let request = try ProtocolJSON.frame(["put": length])
            var fds = [fd] + (extra.map { [$0] } ?? [])
            _ = request.withUnsafeBytes { raw in fds.withUnsafeMutableBufferPointer { cls_send_fds(connection.fd, $0.baseAddress, Int32($0.count), raw.baseAddress, raw.count) } }
            return String(decoding: try connection.receiveFrame() ?? [], as: UTF8.self)
        }
        let unsealed = memfd_create("x", UInt32(MFD_CLOEXEC))
        _ = ftruncate(unsealed, 4096)
        #expect(try put(unsealed, 4096).contains("not sealed"))
        var pair: [Int32] = [-1, -1]
        _ = socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &pair)
        #expect(try put(pair[0], 4096).contains("not a memfd"))
        let sealed = Self.pattern(100_000).withUnsafeBytes { sp_bytes_create($0.baseAddress, $0.count) }
        #expect(try put(sealed, 5000).contains("not of the announced 5000 bytes"))
        #expect(try put(sealed, 100_000, extra: sealed).contains("exactly one descriptor"))
        #expect(try put(sealed, 100_000).contains("token"))
        for fd in [unsealed, pair[0], pair[1], sealed] { close(fd) }
        // A token for bytes of another length than the call announces is refused (and used up).
        let other = Self.pattern(70_000).withUnsafeBytes { sp_bytes_create($0.baseAddress, $0.count) }
        let handedIn = try put(other, 70_000)
        close(other)
        let token = try #require(try? JSONDecoder().decode([String: String].self, from: Data(handedIn.utf8))["token"])
        let raw = try BlockingConnection.connect(path: sup.socket)
        try raw.sendFrame([UInt8].frame(body: Array(#"{"type":"call","id":1,"target":"b.kit","method":"digest","params":{"data":{"$bytes":0}},"attachments":[{"length":1,"token":"\#(token)"}]}"#.utf8)))
        let answer = String(decoding: try raw.receiveFrame() ?? [], as: UTF8.self)
        #expect(answer.contains("badRequest") && answer.contains("no bytes of 1"), "\(answer)")
        raw.close()
        // Hand-ins nobody calls with are held 10 s each, and at most a quarter of the supervisor's
        // descriptors at once (1,024 at least): the next is refused, unavailable (a moment later
        // it may not be), the supervisor's descriptors bounded.
        let limits = try String(contentsOfFile: "/proc/\(sup.pid)/limits", encoding: .utf8)
        let openFiles = limits.split(separator: "\n").first { $0.hasPrefix("Max open files") }
            .flatMap { $0.split(separator: " ", omittingEmptySubsequences: true).dropFirst(3).first.flatMap { Int($0) } } ?? 0
        let most = max(64, min(65_536, min(openFiles, 1 << 20) / 4))
        let many = Self.pattern(10).withUnsafeBytes { sp_bytes_create($0.baseAddress, $0.count) }
        var refusedAt: Int?
        var refusal = ""
        for i in 0..<(most + 10) where refusedAt == nil {
            let answer = try put(many, 10)
            if answer.contains("handed-in bytes whose calls it has not taken yet") { refusedAt = i; refusal = answer }
        }
        close(many)
        // The one made above (70,000 bytes) was used up; the first (100,000) still waits.
        #expect(refusedAt == most - 1, "\(String(describing: refusedAt)) of \(most)")
        #expect(refusal.contains(#""code":"unavailable""#), "\(refusal)")
        // The hand-ins nobody called with expire (10 s) and are closed.
        try sup.waitUntil(timeout: 20, "the supervisor's descriptors back where they were") { try openFDs(sup.pid) <= fdsBefore }
    }

    @Test("bytes over maxPayloadMB are refused with badRequest before anything maps them; a plain call of a bytes method shows the placeholder")
    func overTheLimit() throws {
        let w = try TestWorld()
        try w.bundle("b.kit")
        try #"{"maxPayloadMB": 1}"#.write(toFile: w.root + "/config.json", atomically: true, encoding: .utf8)
        let sup = try RunningSupervisor(w, args: ["--config", w.root + "/config.json"])
        let big = try sup.cli("call", "--output", w.root + "/big.bin", "b.kit", "bytes", #"{"size":2000000}"#)
        #expect(big.code == 1 && big.err.contains("badRequest") && big.err.contains("maxPayloadMB"), "\(big.err)")
        #expect(try sup.cli("call", "--output", w.root + "/ok.bin", "b.kit", "bytes", #"{"size":1000000}"#).code == 0)
        #expect(try sup.cli("call", "b.kit", "bytes", #"{"size":10}"#).out.contains(#"{"$bytes":0}"#))
    }
}
