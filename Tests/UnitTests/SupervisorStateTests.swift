#if canImport(Glibc)
import Glibc
#endif
import LinuxSupport
import NIOCore
import PluginProtocol
import Testing
import SupervisorCore
@testable import SupervisorKit

@Suite struct HealthRulesTests {
    @Test func memoryVerdicts() {
        var limits = MemoryLimits(hard: 100 << 20, soft: 75 << 20)
        #expect(limits.verdict(resident: 100 << 20, warned: false) == .overHard)
        #expect(limits.verdict(resident: 80 << 20, warned: false) == .overSoft)
        #expect(limits.verdict(resident: 80 << 20, warned: true) == .unchanged)
        #expect(limits.verdict(resident: 70 << 20, warned: true) == .unchanged, "between 90 % and 100 % of soft: no re-arm")
        #expect(limits.verdict(resident: 60 << 20, warned: true) == .backUnderSoft)
        limits.soft = 10 << 20
        #expect(limits.verdict(resident: 5 << 20, warned: false) == .unchanged)
    }

    @Test func statm() {
        let page = MemoryLimits.pageSize
        let parsed = MemoryLimits.parseStatm(Array("1000 200 50 10 0 300 0\n".utf8))
        #expect(parsed?.resident == 200 * page && parsed?.data == 300 * page)
        #expect(MemoryLimits.parseStatm(Array("garbage".utf8)) == nil)
    }

    @Test func heldMemoryIsAnonymousAndSharedNotMappedFiles() {
        let status = "Name:\tplugin-worker\nVmRSS:\t  170000 kB\nRssAnon:\t    3000 kB\nRssFile:\t  166000 kB\nRssShmem:\t    1000 kB\nThreads:\t3\n"
        #expect(MemoryLimits.parseHeld(Array(status.utf8)) == 4000 << 10)
        #expect(MemoryLimits.parseHeld(Array("Name:\tx\nRssAnon:\t 12 kB\n".utf8)) == nil, "without RssShmem: no figure")
        #expect(MemoryLimits.parseHeld(Array("garbage".utf8)) == nil)
        let limits = MemoryLimits(hard: 100 << 20, soft: 75 << 20)
        #expect(!limits.mayMatter(resident: 60 << 20) && limits.mayMatter(resident: 68 << 20))
    }

    @Test func rateWindow() {
        var w = RateWindow(limit: 2, floodLimit: 4)
        let t = Instant(nanoseconds: 5_000_000_000)
        #expect(w.admit(now: t) == .admit(droppedBefore: 0))
        #expect(w.admit(now: t) == .admit(droppedBefore: 0))
        #expect(w.admit(now: t) == .drop(droppedBefore: 0))
        #expect(w.admit(now: t) == .drop(droppedBefore: 0))
        #expect(w.admit(now: t) == .flood)
        // The next window reports what was dropped in the last.
        #expect(w.admit(now: t + .seconds(1)) == .admit(droppedBefore: 2), "the flood verdict is not a drop")
    }

    @Test("with a byte limit: what would pass it is dropped (one larger than the limit always), the small ones after it still pass")
    func rateWindowBytes() {
        var w = RateWindow(limit: 10, byteLimit: 100)
        let t = Instant(nanoseconds: 5_000_000_000)
        #expect(w.admit(now: t, size: 500) == .drop(droppedBefore: 0), "larger than a whole window")
        #expect(w.admit(now: t, size: 60) == .admit(droppedBefore: 0))
        #expect(w.admit(now: t, size: 60) == .drop(droppedBefore: 0))
        #expect(w.admit(now: t, size: 40) == .admit(droppedBefore: 0))
        #expect(w.admit(now: t, size: 1) == .drop(droppedBefore: 0))
        #expect(w.admit(now: t + .seconds(1), size: 100) == .admit(droppedBefore: 3))
        // Only large ones: each second's first says what the one before dropped.
        #expect(w.admit(now: t + .seconds(2), size: 500) == .drop(droppedBefore: 0))
        #expect(w.admit(now: t + .seconds(3), size: 500) == .drop(droppedBefore: 1))
    }
}

/// The core names signals as LinuxSupport does (LinuxSignal, for ExitClassifier).
@Suite struct SignalNameTests {
    @Test func theCoresNamesAreLinuxSupports() {
        for number in Int32(1)...64 {
            #expect(LinuxSignal.name(number) == LifecycleSignals.name(number), "signal \(number)")
            if let name = LinuxSignal.number(LinuxSignal.name(number)) { #expect(LifecycleSignals.number(LinuxSignal.name(number)) == name) }
        }
        #expect(LinuxSignal.segv == SIGSEGV && LinuxSignal.bus == SIGBUS && LinuxSignal.ill == SIGILL && LinuxSignal.sys == SIGSYS)
    }
}

@Suite struct WireTests {
    /// A frame is written into the storage it was given and handed back in it: no copy on the way
    /// in (the encoder holds the only reference) nor out (`finish` moves the sink out). A copy
    /// here is an allocation on every frame a worker or the supervisor sends.
    @Test func framesAreBuiltInTheStorageGivenAndHandedBackWithoutACopy() {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(256)
        let storage = bytes.withUnsafeBufferPointer { UnsafeRawPointer($0.baseAddress) }
        var array = FrameBuilder(kind: .reply, into: consume bytes)
        array.uint("id", 7)
        array.raw("result", Array("1".utf8))
        let frame = array.finish()
        #expect(frame.withUnsafeBufferPointer { UnsafeRawPointer($0.baseAddress) } == storage)
        #expect(String(decoding: frame[4...], as: UTF8.self) == #"{"type":"reply","id":7,"result":1}"#)

        let buffer = ByteBufferAllocator().buffer(capacity: 256)
        let nioStorage = buffer.withVeryUnsafeBytes { $0.baseAddress }
        var nio = FrameEncoder(kind: .reply, into: consume buffer)
        nio.uint("id", 7)
        let sent = nio.finish()
        #expect(sent.withVeryUnsafeBytes { $0.baseAddress } == nioStorage)
        #expect(sent.readableBytes == frame.count - 11)
    }

    /// The supervisor's frames are encoded into NIO buffers and parsed from them by the same
    /// FrameParser the blocking readers use: byte-for-byte the frames the array encoder makes.
    @Test func byteBufferAndArrayEncodersAgreeAndOneParserReadsBoth() throws {
        func fill<S: FrameSink>(_ e: inout FrameEncoder<S>) {
            e.uint("id", 18_446_744_073_709_551_615)
            e.string("name", "q\"\\\n\u{1}é")
            e.object("payload", ["identifier": .string("a.b"), "dependencies": .strings(["x", "y\""])])
            e.error(.timeout, "late")
        }
        var array = FrameBuilder(kind: .event)
        fill(&array)
        let bytes = array.finish()
        var buffer = FrameEncoder(kind: .event, into: ByteBufferAllocator().buffer(capacity: 8))
        fill(&buffer)
        var nio = buffer.finish()
        #expect(Array(nio.readableBytesView) == bytes)

        var parser = FrameParser(maxBody: 1 << 10)
        let length = try #require(try parser.nextBody(in: &nio))
        let body = nio.readSlice(length: length)!
        try body.withUnsafeReadableBytes { raw in
            let env = try Envelope.parse(raw)
            #expect(env.id == UInt64.max)
            #expect(Envelope.string(raw, env.name) == "q\"\\\n\u{1}é")
            let payload = try ProtocolJSON.decode([String: FlatValue].self, from: UnsafeRawBufferPointer(rebasing: raw[env.payload!]))
            #expect(payload["dependencies"] == .list(["x", "y\""]))
        }
        #expect(nio.readableBytes == 0 && parser.state == .waitingForHeader)
    }

    enum FlatValue: Decodable, Equatable {
        case text(String), list([String])
        init(from decoder: any Decoder) throws {
            let c = try decoder.singleValueContainer()
            if let s = try? c.decode(String.self) { self = .text(s) } else { self = .list(try c.decode([String].self)) }
        }
    }

    @Test func parserWaitsForWholeBodies() throws {
        var parser = FrameParser(maxBody: 16)
        var buffer = ByteBufferAllocator().buffer(capacity: 16)
        buffer.writeBytes([0, 0, 0, 3, UInt8(ascii: "{")])
        #expect(try parser.nextBody(in: &buffer) == nil)
        #expect(parser.state == .waitingForFrame(length: 3))
        buffer.writeBytes(Array("}x".utf8))
        #expect(try parser.nextBody(in: &buffer) == 3)
        buffer.writeBytes([0, 0, 0, 17])
        var next = FrameParser(maxBody: 16)
        buffer.moveReaderIndex(forwardBy: 3)
        #expect(throws: Frame.HeaderError.tooLarge(length: 17, limit: 16)) { try next.nextBody(in: &buffer) }
    }
}

@Suite struct SandboxAnswerTests {
    func call(_ nr: Int32, arch: UInt32 = SandboxAnswers.auditArchX86_64, _ args: [UInt64] = [0, 0, 0, 0, 0, 0]) -> SeccompCall {
        SeccompCall(tid: 1, nr: nr, arch: arch, args: args)
    }

    @Test func namesAndFatality() {
        #expect(SandboxAnswers.name(call(59)) == ("execve", false))
        #expect(SandboxAnswers.name(call(41)) == ("socket", false))
        #expect(SandboxAnswers.name(call(39 | 0x4000_0000)) == ("x32:39", true))
        #expect(SandboxAnswers.name(call(20, arch: 0x4000_0003)) == ("foreign-arch:20", true))
        #expect(SandboxAnswers.name(call(9999)).name == "syscall:9999")
    }

    @Test func thePolicyTellsViolationsFromDenials() {
        #expect(SeccompPolicy.isFatal("execve", args: [0, 0, 0]))
        #expect(SeccompPolicy.isFatal("ptrace", args: [16, 1, 0]))
        // clone: a fork (no CLONE_THREAD) is fatal; socket, prlimit64 are plain denials.
        #expect(SeccompPolicy.isFatal("clone", args: [0x4111, 0, 0]))  // CLONE_VM|CLONE_VFORK|SIGCHLD
        #expect(!SeccompPolicy.isFatal("clone", args: [0x3D0F00, 0, 0]))  // pthread_create's flags
        #expect(!SeccompPolicy.isFatal("socket", args: [1, 2, 0]))
        #expect(!SeccompPolicy.isFatal("prlimit64", args: [0, 7, 0x7fff0000]))
        #expect(SeccompPolicy.isFatal("personality", args: [8]))
        #expect(!SeccompPolicy.isFatal("personality", args: [0]))
    }

    @Test func callsThatTouchOnlyTheWorkerAreAllowed() {
        // Refused, `for (;;) pause();` was a flood of denials, each a round trip to the supervisor.
        for name in ["pause", "inotify_init", "get_mempolicy", "sched_getattr", "sched_rr_get_interval", "readahead"] {
            #expect(SeccompPolicy.allowed.contains(name), "\(name)")
            #expect(!SeccompPolicy.fatal.contains(name), "\(name)")
        }
    }
}
