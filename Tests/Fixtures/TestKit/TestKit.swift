import Dispatch
import PluginSDK
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Made on its first use, slowly: the thread that reads it first holds the Swift runtime's
/// once-lock (`swift_once`) for 200 ms, and a second reader meanwhile waits on that lock (`onceRace`).
private let onceRaceEntered = Atomic<Bool>(false)
private let slowlyMade: Int = {
    onceRaceEntered.store(true, ordering: .releasing)
    usleep(200_000)
    return 21
}()

/// A plugin for the integration tests: one library loaded under many manifests (identifiers and
/// dependencies differ per bundle). It records when its lifecycle events arrive, echoes, sleeps,
/// calls other plugins, writes junk to stdout and misbehaves on request.
final class TestKit: Pluggable {
    private let context = Mutex<PluginContext?>(nil)
    private let events = Mutex<[Stamp]>([])

    init() {}

    struct Stamp: Codable, Sendable {
        var event: String
        var at: UInt64
    }

    struct Info: Codable, Sendable {
        var identifier: String
        var pid: Int32
        var events: [Stamp]
    }

    struct SleepParams: Codable, Sendable { var ms: Int }
    struct TextParams: Codable, Sendable { var size: Int; var ms: Int }
    struct OnceRace: Codable, Sendable { var value: Int; var mainThread: Bool }
    struct CallParams: Codable, Sendable { var target: String; var method: String; var params: JSONValue? }
    struct OpenParams: Codable, Sendable { var uri: String }
    struct CrashParams: Codable, Sendable { var how: String }

    static func now() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }

    /// Whether this is the process's main thread (its id is the process's): /proc/thread-self
    /// names `<pid>/task/<tid>`.
    static func onMainThread() -> Bool {
        var buffer = [CChar](repeating: 0, count: 64)
        let n = readlink("/proc/thread-self", &buffer, buffer.count - 1)
        guard n > 0 else { return false }
        let parts = String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self).split(separator: "/")
        return parts.count == 3 && parts[0] == parts[2]
    }

    static func threadName() -> String {
        let fd = open("/proc/thread-self/comm", O_RDONLY)
        guard fd >= 0 else { return "?" }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 32)
        let n = read(fd, &buffer, buffer.count)
        return String(decoding: buffer[0..<max(0, n)].filter { $0 != 10 }, as: UTF8.self)
    }

    private func record(_ event: String) {
        events.withLock { $0.append(Stamp(event: event, at: Self.now())) }
    }

    func startup(_ context: PluginContext) async throws {
        self.context.withLock { $0 = context }
        // The fault tests put this file in a bundle to crash here.
        if access(context.bundleDirectory + "/crash-in-startup", F_OK) == 0 { raise(SIGSEGV) }
        if access(context.bundleDirectory + "/fail-startup", F_OK) == 0 {
            throw PluginError(.pluginError, "startup refused on purpose")
        }
        // A slow start, for the tests of calls that wait for a plugin to run.
        if let ms = Self.milliseconds(in: context.bundleDirectory + "/startup-delay-ms") {
            try await Task.sleep(nanoseconds: ms * 1_000_000)
        }
        // A start held until the test lets it go (the update tests): while the bundle has a
        // `startup-gate` file, it waits for `go` in its data folder, up to a minute. The window
        // lasts as long as the test needs, whatever its status polls cost on a loaded machine.
        if access(context.bundleDirectory + "/startup-gate", F_OK) == 0 {
            // Says it is there (its startup reached, so it said hello): a test stops it only then.
            let marker = open(context.dataDirectory + "/at-gate", O_WRONLY | O_CREAT, 0o600)
            if marker >= 0 { close(marker) }
            let deadline = Self.now() + 60_000_000_000
            while access(context.dataDirectory + "/go", F_OK) != 0 {
                guard Self.now() < deadline else { throw PluginError(.pluginError, "the startup gate stayed shut for a minute") }
                try await Task.sleep(nanoseconds: 5_000_000)
            }
        }
        record("startup")
        // A version that crashes a while after it started (the update grace period's tests).
        if access(context.bundleDirectory + "/crash-after-start", F_OK) == 0 {
            Task.detached {
                try? await Task.sleep(nanoseconds: 300_000_000)
                raise(SIGSEGV)
            }
        }
    }

    func launch() async { record("launch") }
    func memoryWarning() async { record("memoryWarning") }
    func background() async { record("background") }
    func foreground() async { record("foreground") }
    func dependencyRestarted(_ identifier: String) async { record("dependencyRestarted:\(identifier)") }
    func resourceUpdated(name: String, path: String) async { record("resourceUpdated:\(name)") }

    /// The number of milliseconds a bundle's file says, if it has that file.
    static func milliseconds(in path: String) -> UInt64? {
        let fd = open(path, O_RDONLY)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 32)
        let n = read(fd, &buffer, buffer.count)
        return n > 0 ? UInt64(String(decoding: buffer[..<n], as: UTF8.self).filter(\.isNumber)) : nil
    }

    func willTerminate() async {
        record("willTerminate")
        // Told to stop: a test can see it begin (the slow goodbye below then holds the worker).
        if let dir = context.withLock({ $0?.dataDirectory }) {
            close(open(dir + "/terminating", O_WRONLY | O_CREAT, 0o600))
        }
        // A slow goodbye, for the tests of calls that come while a plugin stops.
        if let bundle = context.withLock({ $0?.bundleDirectory }), let ms = Self.milliseconds(in: bundle + "/terminate-delay-ms") {
            try? await Task.sleep(nanoseconds: ms * 1_000_000)
        }
        // Leave a trace the test can read after the process is gone.
        guard let dir = context.withLock({ $0?.dataDirectory }) else { return }
        let line = "\(Self.now())\n"
        let fd = open(dir + "/terminated", O_WRONLY | O_CREAT | O_APPEND, 0o600)
        if fd >= 0 {
            _ = line.withCString { write(fd, $0, strlen($0)) }
            close(fd)
        }
    }

    func ctx() throws -> PluginContext {
        guard let c = context.withLock({ $0 }) else { throw PluginError(.unavailable, "not started") }
        return c
    }

    struct RowsParams: Codable, Sendable {
        var count: Int
        var delayMs: Int?
        /// Throw a pluginError, or crash the worker, after sending this many rows.
        var failAt: Int?
        var crashAt: Int?
    }
    struct Row: Codable, Sendable, Equatable { var row: Int }
    struct BlobParams: Codable, Sendable { var count: Int; var size: Int }
    /// `fill`: every byte 7 (made at memset's speed, for supervisor-bench), else the pattern.
    struct SizeParams: Codable, Sendable { var size: Int; var fill: Bool? }
    struct RelayParams: Codable, Sendable { var target: String; var count: Int; var takeOnly: Int? }
    /// What the stream methods did, for the tests: rows sent, streams ended by cancellation,
    /// streams completed, and the last stream's row count when it ended.
    struct DigestParams: Codable, Sendable { var data: Bytes }
    struct BytesStreamRelayParams: Codable, Sendable { var target: String; var count: Int; var size: Int }
    struct BytesRelayParams: Codable, Sendable { var target: String; var size: Int }
    struct Digest: Codable, Sendable, Equatable {
        var count: Int
        var sum: UInt64
        var pattern: Bool
        init(_ bytes: Bytes) throws {
            (count, sum, pattern) = try bytes.withUnsafeBytes { raw in
                var sum: UInt64 = 0
                var pattern = true
                for (i, b) in raw.enumerated() {
                    sum &+= UInt64(b)
                    if pattern, b != UInt8(i % 251) { pattern = false }
                }
                return (raw.count, sum, pattern)
            }
        }
    }
    struct StreamReport: Codable, Sendable { var sent: Int; var cancelled: Int; var completed: Int }
    private let streams = Mutex(StreamReport(sent: 0, cancelled: 0, completed: 0))
    /// Memory `hold` keeps, written to so it is resident.
    private let held = Mutex<[[UInt8]]>([])

    private func exportStreams(_ api: PluginAPI) {
        // Rows {"row": i} for i in 0..<count, as fast as the reader takes them (or `delayMs` apart).
        api.stream("rows") { [self] (p: RowsParams, out: StreamOutput<Row>) in
            do {
                for i in 0..<p.count {
                    if p.failAt == i { throw PluginError(.pluginError, "failed on purpose after \(i) rows") }
                    if p.crashAt == i { raise(SIGSEGV) }
                    if let ms = p.delayMs { try await Task.sleep(for: .milliseconds(ms)) }
                    try await out.send(Row(row: i))
                    streams.withLock { $0.sent += 1 }
                }
                streams.withLock { $0.completed += 1 }
            } catch is CancellationError {
                streams.withLock { $0.cancelled += 1 }
                throw CancellationError()
            }
        }
        // `count` strings of `size` bytes ('x'), as fast as the reader takes them (supervisor-bench's
        // stream throughput; the same 64 KiB payloads as the go-plugin peer's gRPC stream).
        api.stream("blob") { (p: BlobParams, out: StreamOutput<String>) in
            let text = String(repeating: "x", count: max(0, p.size))
            for _ in 0..<max(0, p.count) { try await out.send(text) }
        }
        // The same as raw bytes: `count` elements of `size` bytes (at most 64 KiB), element k's
        // byte i being (k + i) % 251, inline in their chunks (no JSON around them).
        api.stream("blobBytes") { (p: BlobParams, out: StreamOutput<Bytes>) in
            for k in 0..<max(0, p.count) {
                try await out.send(Bytes((0..<max(0, p.size)).map { UInt8((k + $0) % 251) }))
            }
        }
        // `count` elements of `size` bytes ('x'), one buffer sent again and again (the bench's
        // bytes stream: what it measures is the trip, not making the bytes).
        api.stream("blobBytesSame") { (p: BlobParams, out: StreamOutput<Bytes>) in
            let element = Bytes([UInt8](repeating: UInt8(ascii: "x"), count: max(0, p.size)))
            for _ in 0..<max(0, p.count) { try await out.send(element) }
        }
        // Another plugin's bytes stream, passed on element by element (through the supervisor, or
        // over the peer link once there is one), with each element's checksum checked against the
        // pattern: the count of elements that were not what was sent.
        api.method("bytesStreamRelay") { [weak self] (p: BytesStreamRelayParams) async throws -> Int in
            guard let self else { return -1 }
            var wrong = 0
            var k = 0
            for try await element in try ctx().stream(p.target, "blobBytes", BlobParams(count: p.count, size: p.size), as: Bytes.self) {
                let ok = try element.withUnsafeBytes { raw in raw.count == p.size && raw.enumerated().allSatisfy { $0.element == UInt8((k + $0.offset) % 251) } }
                if !ok { wrong += 1 }
                k += 1
            }
            return k == p.count ? wrong : -1
        }
        // `size` bytes: byte i is i % 251 (raw bytes: inline up to 64 KiB, else a sealed memfd).
        api.bytes("bytes") { (p: SizeParams) async throws -> Bytes in
            // Written straight into the memfd (no copy), at memset's speed.
            if p.fill == true { return try Bytes(count: max(0, p.size)) { if let base = $0.baseAddress { memset(base, 7, $0.count) } } }
            return Bytes((0..<max(0, p.size)).map { UInt8($0 % 251) })
        }
        api.method("streamReport") { [self] () -> StreamReport in streams.withLock { $0 } }
        // Bytes into a plugin: their length, a checksum, and whether they follow `bytes`'s pattern
        // (a sync method: decoded on the worker's thread, a memfd read in place).
        api.method("digest") { (p: DigestParams) throws -> Digest in try Digest(p.data) }
        // The bytes it was given, given back (a memfd above 64 KiB passed on as it came: no copy).
        api.bytes("echoBytes") { (p: DigestParams) async throws -> Bytes in p.data }
        // Bytes both ways between plugins: `size` bytes from `target`'s `bytes`, handed back to its
        // `digest` (through the supervisor, as memfds above 64 KiB), and the digest of both ends.
        api.method("bytesRelay") { [weak self] (p: BytesRelayParams) async throws -> [Digest] in
            guard let self else { return [] }
            let got = try await ctx().call(p.target, "bytes", SizeParams(size: p.size), as: Bytes.self)
            let theirs = try await ctx().call(p.target, "digest", DigestParams(data: got), as: Digest.self)
            return [try Digest(got), theirs]
        }
        // The sum of an input of integers, then each running total as an element.
        api.stream("sum", input: Int.self) { (_: Empty, input: StreamInput<Int>, out: StreamOutput<Int>) in
            var total = 0
            var totals: [Int] = []
            for try await n in input {
                total += n
                totals.append(total)
            }
            for t in totals { try await out.send(t) }
        }
        // Another plugin's rows, passed on (plugin → plugin through the supervisor); `takeOnly`
        // stops reading early (the producer must be cancelled).
        api.stream("relay") { [weak self] (p: RelayParams, out: StreamOutput<Row>) in
            guard let self else { return }
            var taken = 0
            for try await row in try ctx().stream(p.target, "rows", RowsParams(count: p.count), as: Row.self) {
                try await out.send(row)
                taken += 1
                if let only = p.takeOnly, taken >= only { break }
            }
        }
    }

    struct ViaParams: Codable, Sendable { var target: String; var method: String?; var count: Int?; var sleepMs: Int? }

    /// Streams this plugin reads from a dependency (over a peer link once there is one).
    private func exportStreamReaders(_ api: PluginAPI) {
        // `count` integers 1… as the input of `target`'s `sum`; its last running total.
        api.method("sumVia") { [weak self] (p: ViaParams) async throws -> Int in
            guard let self else { return 0 }
            let numbers = AsyncStream<Int> { c in
                for i in 1...max(1, p.count ?? 1) { c.yield(i) }
                c.finish()
            }
            var last = 0
            for try await total in try ctx().stream(p.target, "sum", Empty(), input: numbers, as: Int.self) { last = total }
            return last
        }
        // Reads one element of `target`'s endless stream (`method`, else `rows`), then stops reading
        // for `sleepMs` and reads on:
        // the error code that ends it (a reader that stalls past the idle timeout gets `timeout`).
        api.method("stallVia") { [weak self] (p: ViaParams) async throws -> String in
            guard let self else { return "" }
            var iterator = try ctx().stream(p.target, p.method ?? "rows", RowsParams(count: 1_000_000), as: JSONValue.self).makeAsyncIterator()
            _ = try await iterator.next()
            try await Task.sleep(for: .milliseconds(p.sleepMs ?? 0))
            do {
                while try await iterator.next() != nil {}
                return "ended"
            } catch let error as PluginError {
                return error.code
            }
        }
        // Reads `target`'s stream `method` to its end: how many elements, or the error code.
        api.method("countVia") { [weak self] (p: ViaParams) async throws -> String in
            guard let self else { return "" }
            var n = 0
            do {
                for try await _ in try ctx().stream(p.target, p.method ?? "rows", RowsParams(count: p.count ?? 0), as: JSONValue.self) { n += 1 }
                return "\(n)"
            } catch let error as PluginError {
                return "\(error.code) after \(n)"
            }
        }
    }

    func exports(_ api: PluginAPI) {
        exportStreams(api)
        exportStreamReaders(api)
        exportReplay(api)
        api.method("echo") { (value: JSONValue) in value }
        // The cheapest call: no parameters, a constant result (benchmarks).
        api.method("ping") { () -> Int in 1 }
        api.method("info") { () throws -> Info in
            Info(identifier: try self.ctx().identifier, pid: getpid(), events: self.events.withLock { $0 })
        }
        api.method("sleep") { (p: SleepParams) async throws -> Int in
            self.record("sleeping:\(p.ms)")
            do {
                try await Task.sleep(nanoseconds: UInt64(max(0, p.ms)) * 1_000_000)
            } catch {
                self.record("cancelled:\(p.ms)")
                throw error
            }
            return p.ms
        }
        api.method("call") { (p: CallParams) async throws -> JSONValue in
            try await self.ctx().call(p.target, p.method, p.params ?? .null, as: JSONValue.self)
        }
        // A method of the host program (SPEC §12), through the SDK's own call.
        api.method("callHost") { (p: CallParams) async throws -> JSONValue in
            try await self.ctx().callHost(p.method, p.params ?? .null, as: JSONValue.self)
        }
        // The Swift SDK's own plugin → plugin path (benchmarks): a string in, the callee's `ping`
        // as an Int out, both in the SDK's plain coding (no Foundation JSON, unlike `call`'s JSONValue).
        api.method("pingVia") { (target: String) async throws -> Int in
            try await self.ctx().call(target, "ping", as: Int.self)
        }
        // The same without thread hops (`.inline`: it only waits on the callee).
        api.method("pingViaInline", execution: .inline) { (target: String) async throws -> Int in
            try await self.ctx().call(target, "ping", as: Int.self)
        }
        // `call` as an inline method, and one that a timer resumes (no delivering thread).
        api.method("callInline", execution: .inline) { (p: CallParams) async throws -> JSONValue in
            try await self.ctx().call(p.target, p.method, p.params ?? .null, as: JSONValue.self)
        }
        // Where code runs (thread names, read from /proc: `pthread_self()` is a const function,
        // which the optimizer may reuse across an `await` that changed threads): a sync method on
        // the I/O thread; an inline method before and after awaiting `target`'s `ping`.
        api.method("thread") { () -> String in Self.threadName() }
        // The Swift runtime's own lock taken on the worker's main thread (the I/O thread, where a
        // sync method runs) and wanted by a second thread while it is held: `slowlyMade`'s
        // initializer, read first here, then by a global queue's thread. A lock whose owner is
        // recorded by a stale thread id (a forked worker that kept its fork server's) never
        // hands over (ForkServerTests.runtimeLocksInForkedWorkers).
        api.method("onceRace") { () -> OnceRace in
            let done = DispatchSemaphore(value: 0)
            let other = Mutex<Int>(0)
            DispatchQueue.global().async {
                while !onceRaceEntered.load(ordering: .acquiring) { sched_yield() }
                let value = slowlyMade
                other.withLock { $0 = value }
                done.signal()
            }
            let mine = slowlyMade
            done.wait()
            return OnceRace(value: mine + other.withLock { $0 }, mainThread: Self.onMainThread())
        }
        api.method("threadsInline", execution: .inline) { (target: String) async throws -> [String] in
            let before = Self.threadName()
            _ = try await self.ctx().call(target, "ping", as: Int.self)
            return [before, Self.threadName()]
        }
        api.method("sleepInline", execution: .inline) { (p: SleepParams) async throws -> Int in
            try await Task.sleep(nanoseconds: UInt64(max(0, p.ms)) * 1_000_000)
            return p.ms
        }
        // A caller that expects an Int back (the SDK's error for a result of another type).
        api.method("callForInt") { (p: CallParams) async throws -> Int in
            try await self.ctx().call(p.target, p.method, p.params ?? .null, as: Int.self)
        }
        // The W3C traceparent this call arrived with (SPEC §3), as the SDK hands it to the plugin.
        api.method("traceparent") { () async throws -> String in
            try self.ctx().traceparent ?? ""
        }
        api.method("syncTraceparent") { () throws -> String in
            try self.ctx().traceparent ?? ""
        }
        // One line on stderr, which the supervisor logs under this plugin.
        api.method("stderr") { (p: [String: String]) -> String in
            let line = (p["line"] ?? "") + "\n"
            _ = line.withCString { write(2, $0, strlen($0)) }
            return "ok"
        }
        // A call the sandbox refuses without a network permission (as syslog's would be): the
        // errno it got, EPERM, and one `socket` in the plugin's `sandboxDenials`.
        api.method("socket") { () -> Int in
            let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            if fd >= 0 { close(fd); return 0 }
            return Int(errno)
        }
        api.method("open") { (p: OpenParams) async throws -> JSONValue in
            try await self.ctx().open(p.uri, as: JSONValue.self)
        }
        api.method("junk") { () -> String in
            // Bytes that would break the protocol if stdout were the protocol channel.
            var junk: [UInt8] = [0, 0, 0, 5]
            junk += Array("{{{{ not json\n".utf8)
            junk += [0xFF, 0xFE, 0x00, 0x7F]
            junk += Array("\nJUNK-LINE-FROM-PLUGIN\n".utf8)
            _ = junk.withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
            return "ok"
        }
        // A large answer to a small request, after `ms` (ControlBackPressureTests).
        api.method("text") { (p: TextParams) async throws -> String in
            try await Task.sleep(for: .milliseconds(p.ms))
            return String(repeating: "t", count: p.size)
        }
        api.method("fail") { () throws -> String in
            throw PluginError(code: "custom", message: "failed on purpose")
        }
        api.method("crash") { (p: CrashParams) -> String in
            switch p.how {
            case "segv": raise(SIGSEGV)
            case "abort": abort()
            case "fatal": fatalError("fatalError on purpose")
            case "exit3": exit(3)
            case "exit0": exit(0)
            default: break
            }
            return "unknown crash \(p.how)"
        }
        api.route("/echo") { request in request.query }
        // Keeps `mb` MiB more, resident, until the worker ends; answers how many it keeps.
        api.method("hold") { (p: [String: Int]) -> Int in
            let block = [UInt8](repeating: 1, count: max(0, p["mb"] ?? 1) << 20)
            return self.held.withLock { held in
                held.append(block)
                return held.reduce(0) { $0 + $1.count } >> 20
            }
        }
        // The current copy of a resource (live if refreshed, else bundled) and its contents.
        api.method("resource") { (p: [String: String]) throws -> [String: String] in
            let path = try self.ctx().resourcePath(p["name"] ?? "")
            let fd = open(path, O_RDONLY)
            guard fd >= 0 else { throw PluginError(.notFound, "cannot open \(path)") }
            defer { close(fd) }
            var buffer = [UInt8](repeating: 0, count: 4096)
            let n = read(fd, &buffer, buffer.count)
            return ["path": path, "content": String(decoding: buffer[0..<max(0, n)], as: UTF8.self)]
        }
    }
}

/// Any JSON value.
enum JSONValue: Codable, Sendable, Equatable {
    case null, bool(Bool), number(Double), string(String), array([JSONValue]), object([String: JSONValue])

    init(from decoder: any Decoder) throws {
        let c = try decoder.singleValueContainer()
        if c.decodeNil() { self = .null }
        else if let b = try? c.decode(Bool.self) { self = .bool(b) }
        else if let n = try? c.decode(Double.self) { self = .number(n) }
        else if let s = try? c.decode(String.self) { self = .string(s) }
        else if let a = try? c.decode([JSONValue].self) { self = .array(a) }
        else { self = .object(try c.decode([String: JSONValue].self)) }
    }

    func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        switch self {
        case .null: try c.encodeNil()
        case .bool(let b): try c.encode(b)
        case .number(let n): try c.encode(n)
        case .string(let s): try c.encode(s)
        case .array(let a): try c.encode(a)
        case .object(let o): try c.encode(o)
        }
    }
}

@_cdecl("sp_plugin_create")
public func spPluginCreate(_ host: OpaquePointer?) -> OpaquePointer? { PluginExport.create(TestKit.self, host: host) }
