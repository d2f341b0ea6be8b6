import CLinuxSupport
import Foundation
import IPC
import LinuxSupport
import PluginProtocol
import Protocol
import Synchronization
import Testing

/// Where the package's build products are: beside this test binary.
enum Build {
    static let dir: String = {
        let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        var url = URL(fileURLWithPath: exe).deletingLastPathComponent()
        // Inside an .xctest bundle folder on some toolchains.
        if url.lastPathComponent.hasSuffix(".xctest") { url.deleteLastPathComponent() }
        return url.path
    }()

    static var supervisor: String { dir + "/supervisor" }
    static func library(_ name: String) -> String { dir + "/lib\(name).so" }

    /// `go build -buildmode=c-shared` of the Go package in `folder`, into `<build>/<into>/<named>`
    /// (Debian's golang-go, offline: the standard library only). One build cache for every Go
    /// library of the run: the runtime and the standard library are compiled once.
    static func goSharedLibrary(_ folder: String, into: String, named: String) throws -> String {
        let out = dir + "/" + into
        try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true)
        let lib = out + "/" + named
        var env = ProcessInfo.processInfo.environment
        env["GOCACHE"] = dir + "/go-cache"
        env["GOPATH"] = out + "/gopath"
        env["GOFLAGS"] = "-mod=mod"
        env["GOTOOLCHAIN"] = "local"
        env["CGO_ENABLED"] = "1"
        let r = try Shell.run("/usr/bin/env", ["sh", "-c", "cd '\(folder)' && go build -buildmode=c-shared -o '\(lib)' ."], env: env, timeout: 300)
        guard r.code == 0 else { throw HarnessError("go build failed (scripts/install-deps.sh --tests installs golang-go): \(r.err)") }
        return lib
    }

    /// The sanitizer's options, when the run has them (`./scripts/test.sh --tsan`): a test that builds
    /// a child's environment from scratch adds them, so that child reports where the run looks.
    static var sanitizerEnvironment: [String: String] {
        ProcessInfo.processInfo.environment.filter { $0.key == "TSAN_OPTIONS" }
    }

    /// Whether this is the TSan run (scripts/test-tsan.sh sets TSAN_OPTIONS): the supervisor is
    /// instrumented and several times slower.
    static var threadSanitized: Bool { !sanitizerEnvironment.isEmpty }

    private static let cLock = NSLock()

    /// Compiles a C plugin fixture with plain `cc` against the ABI header (once per run).
    static func cLibrary(_ name: String, source: String, flags: [String] = []) throws -> String {
        cLock.lock()
        defer { cLock.unlock() }
        let out = dir + "/fixtures-c"
        try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true)
        let lib = out + "/lib\(name).so"
        let src = out + "/\(name).c"
        try source.write(toFile: src, atomically: true, encoding: .utf8)
        let header = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("SDK/Sources/CPluginABI/include").path
        let support = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fixtures/CSupport").path
        let r = try Shell.run("/usr/bin/cc", ["-shared", "-fPIC", "-O1", "-I", header, "-I", support, "-o", lib + ".\(getpid())", src] + flags)
        guard r.code == 0 else { throw HarnessError("cc failed for \(name): \(r.err)") }
        try replace(lib, with: lib + ".\(getpid())")
        return lib
    }

    /// A C program built with plain `cc` (a misbehaving binary for a test).
    static func cProgram(_ name: String, source: String) throws -> String {
        cLock.lock()
        defer { cLock.unlock() }
        let out = dir + "/fixtures-c"
        try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true)
        let program = out + "/\(name)"
        let src = out + "/\(name)-main.c"
        try source.write(toFile: src, atomically: true, encoding: .utf8)
        let r = try Shell.run("/usr/bin/cc", ["-O1", "-o", program + ".\(getpid())", src])
        guard r.code == 0 else { throw HarnessError("cc failed for \(name): \(r.err)") }
        try replace(program, with: program + ".\(getpid())")
        return program
    }

    /// Puts a freshly built file in its place in one step: the suite runs as two processes
    /// (scripts/test.sh) that may build the same fixture at once, and a worker of the other may
    /// have the old one mapped (it keeps it: `rename` replaces the name, not the file).
    private static func replace(_ path: String, with built: String) throws {
        guard rename(built, path) == 0 else { throw HarnessError("rename \(built) to \(path): \(String(cString: strerror(errno)))") }
    }

    /// The C example plugin, built as the README's script builds it.
    static func cHello() throws -> String {
        let src = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("examples/CHello/chello.c").path
        return try cLibrary("chello", source: try String(contentsOfFile: src, encoding: .utf8))
    }
}

struct HarnessError: Error, CustomStringConvertible {
    var description: String
    init(_ d: String) { description = d }
}

/// Runs a program to its end, its output in files. Not with Foundation's `Process`: on Linux it
/// learns that a child ended when a socket the child inherited closes, and a program another
/// thread spawns at the same moment inherits that socket too (swift-corelibs-foundation issue
/// 4795), so the first one's end is seen only when the second one ends. A `status` run beside a
/// `Background` install took as long as the install (1.6 s, 10 s) and missed what it was to see.
/// `cls_spawn` closes every other descriptor in the child, and the wait is on a pidfd.
enum Shell {
    struct Result {
        var code: Int32; var out: String; var err: String
        /// Milliseconds spawning it took (a slow round trip's first suspect).
        var launchMs = 0
    }

    static func run(_ path: String, _ args: [String], env: [String: String]? = nil, timeout: TimeInterval = 60) throws -> Result {
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("sh-\(UUID().uuidString)").path
        let outPath = base + ".out", errPath = base + ".err"
        defer { unlink(outPath); unlink(errPath) }
        // Close-on-exec and above 3, as cls_spawn wants its sources.
        func file(_ path: String) throws -> Int32 {
            let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
            guard fd >= 0 else { throw HarnessError("cannot make \(path): \(String(cString: strerror(errno)))") }
            let lifted = fcntl(fd, F_DUPFD_CLOEXEC, 10)
            close(fd)
            return lifted
        }
        let out = try file(outPath), err = try file(errPath)
        defer { close(out); close(err) }
        let environment = (env ?? ProcessInfo.processInfo.environment).map { "\($0.key)=\($0.value)" }
        var pid: pid_t = 0, pidfd: Int32 = -1
        let launching = Date()
        let rc = Spawner.withCStrings([path] + args) { argv in
            Spawner.withCStrings(environment) { envp in cls_spawn(path, argv, envp, -1, -1, -1, -1, out, err, &pid, &pidfd) }
        }
        guard rc == 0 else { throw HarnessError("cannot run \(path): \(String(cString: strerror(rc)))") }
        defer { close(pidfd) }
        let launchMs = Int(Date().timeIntervalSince(launching) * 1000)
        var poller = pollfd(fd: pidfd, events: Int16(POLLIN), revents: 0)
        let deadline = Date().addingTimeInterval(timeout)
        while poll(&poller, 1, Int32(max(0, min(1000, deadline.timeIntervalSinceNow * 1000)))) == 0 {
            if Date() >= deadline {
                _ = cls_pidfd_signal(pidfd, SIGKILL)
                var code: Int32 = 0, signaled: Int32 = 0, rss = 0, cpu: Int64 = 0
                _ = cls_pidfd_wait(pidfd, 0, &code, &signaled, &rss, &cpu)
                throw HarnessError("\(path) \(args) did not finish in \(timeout) s")
            }
        }
        var code: Int32 = 0, signaled: Int32 = 0, rss = 0, cpu: Int64 = 0
        let waited = cls_pidfd_wait(pidfd, 0, &code, &signaled, &rss, &cpu)
        guard waited > 0 else { throw HarnessError("waiting for \(path): \(String(cString: strerror(-waited)))") }
        return Result(code: signaled != 0 ? 128 + code : code,
                      out: (try? String(contentsOfFile: outPath, encoding: .utf8)) ?? "",
                      err: (try? String(contentsOfFile: errPath, encoding: .utf8)) ?? "", launchMs: launchMs)
    }
}

/// A dependency in a test manifest.
struct Dep {
    var id: String
    var range: String?
    init(_ id: String, _ range: String? = nil) { self.id = id; self.range = range }
}

/// A temporary home and plugin folder with bundles made from the package's libraries.
final class TestWorld: @unchecked Sendable {
    let root: String
    let home: String
    let plugins: String

    /// A configuration file of `json` in the world's root, for `start --config`.
    func config(_ json: String) throws -> String {
        let path = root + "/config-\(UUID().uuidString.prefix(6)).json"
        try json.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    init() throws {
        root = FileManager.default.temporaryDirectory.appendingPathComponent("sp-\(UUID().uuidString.prefix(8))").path
        home = root + "/home"
        plugins = root + "/plugins"
        try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: plugins, withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(atPath: root) }

    /// Adds a bundle: `library` is a path to a .so (hard-linked in), the manifest is made from the rest.
    @discardableResult
    func bundle(_ id: String, version: String = "1.0.0", deps: [Dep] = [], library: String = Build.library("TestKit"),
                folder: String? = nil, extra: [String: Any] = [:], in dir: String? = nil) throws -> String {
        let bundle = (dir ?? plugins) + "/" + (folder ?? id)
        try FileManager.default.createDirectory(atPath: bundle, withIntermediateDirectories: true)
        let libName = (library as NSString).lastPathComponent
        let dest = bundle + "/" + libName
        try? FileManager.default.removeItem(atPath: dest)
        if link(library, dest) != 0 { try FileManager.default.copyItem(atPath: library, toPath: dest) }
        var manifest: [String: Any] = ["identifier": id, "version": version, "library": libName]
        if !deps.isEmpty {
            manifest["dependencies"] = deps.map { d -> Any in d.range.map { ["id": d.id, "version": $0] } ?? d.id }
        }
        for (k, v) in extra { manifest[k] = v }
        let data = try JSONSerialization.data(withJSONObject: manifest, options: [.prettyPrinted, .sortedKeys])
        try data.write(to: URL(fileURLWithPath: bundle + "/plugin.json"))
        return bundle
    }

    /// Writes a raw plugin.json (for invalid-manifest tests).
    func rawBundle(_ folder: String, manifest: String) throws -> String {
        let bundle = plugins + "/" + folder
        try FileManager.default.createDirectory(atPath: bundle, withIntermediateDirectories: true)
        try manifest.write(toFile: bundle + "/plugin.json", atomically: true, encoding: .utf8)
        return bundle
    }
}

/// How a test's workers start (`supervisor start --worker-start`).
enum WorkerStart: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case forkServer = "fork-server"
    case exec
    static let both = allCases
    var testDescription: String { rawValue }
}

/// A real `supervisor start` process with its output in files.
final class RunningSupervisor: @unchecked Sendable {
    let world: TestWorld
    let process = Process()
    let outPath: String
    let errPath: String
    var socket: String { world.home + "/supervisor.sock" }

    /// `directory`: where it starts (its current directory), for relative paths in `args`. `start`:
    /// how its workers start (`--worker-start`; the default, the fork server, when nil); a test that
    /// asks for one checks every worker started that way.
    init(_ world: TestWorld, args: [String] = [], environment: [String: String] = [:], waitForReady: Bool = true,
         timeout: TimeInterval = 30, directory: String? = nil, start: WorkerStart? = nil) throws {
        self.world = world
        outPath = world.root + "/stdout-\(UUID().uuidString.prefix(6))"
        errPath = world.root + "/stderr-\(UUID().uuidString.prefix(6))"
        _ = FileManager.default.createFile(atPath: outPath, contents: nil)
        _ = FileManager.default.createFile(atPath: errPath, contents: nil)
        process.executableURL = URL(fileURLWithPath: Build.supervisor)
        process.arguments = ["start", "--home", world.home, "--plugins", world.plugins] + args
            + (start.map { ["--worker-start", $0.rawValue] } ?? [])
        if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
        if !environment.isEmpty {
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
        }
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: outPath))
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: errPath))
        try process.run()
        if waitForReady { try self.waitForReady(timeout: timeout) }
        if waitForReady, let start {
            for p in try status() where p.pid != nil {
                #expect(p.workerStart == start.rawValue, "\(p.identifier) was started by \(p.workerStart ?? "?"), not \(start.rawValue): \(p.workerStartProblem ?? "")")
            }
        }
    }

    deinit {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }

    var stdout: String { (try? String(contentsOfFile: outPath, encoding: .utf8)) ?? "" }
    var log: String { (try? String(contentsOfFile: errPath, encoding: .utf8)) ?? "" }
    var pid: Int32 { process.processIdentifier }

    func waitForReady(timeout: TimeInterval = 30) throws {
        try waitUntil(timeout: timeout, "the ready line") { stdout.contains("ready") }
    }

    /// Until the control socket takes connections: its file appears at `bind`, a moment before
    /// `listen`, when a connection is still refused.
    func waitUntilListening() throws {
        try waitUntil("the control socket to listen") {
            guard let probe = try? BlockingConnection.connect(path: socket) else { return false }
            probe.close()
            return true
        }
    }

    func waitUntil(timeout: TimeInterval = 10, _ what: String, _ condition: () throws -> Bool) throws {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if try condition() { return }
            if !process.isRunning && !what.contains("exit") {
                throw HarnessError("supervisor exited (\(process.terminationStatus)) while waiting for \(what); log:\n\(log)")
            }
            usleep(20_000)
        }
        throw HarnessError("timed out waiting for \(what); log:\n\(log)")
    }

    /// Waits until `value` gives something, and returns it.
    func waitFor<T>(timeout: TimeInterval = 10, _ what: String, _ value: () throws -> T?) throws -> T {
        var found: T?
        try waitUntil(timeout: timeout, what) {
            found = try value()
            return found != nil
        }
        return found!
    }

    /// Runs a CLI command against this supervisor.
    @discardableResult
    func cli(_ args: String...) throws -> Shell.Result { try cli(args) }

    func cli(_ args: [String]) throws -> Shell.Result {
        guard let sub = args.first else { throw HarnessError("no command") }
        return try Shell.run(Build.supervisor, [sub, "--socket", socket] + args.dropFirst())
    }

    func status() throws -> [PluginStatus] {
        let r = try cli("status", "--json")
        guard r.code == 0 else { throw HarnessError("status failed: \(r.err)") }
        return try JSONDecoder().decode([PluginStatus].self, from: Data(r.out.utf8))
    }

    func plugin(_ id: String) throws -> PluginStatus {
        guard let p = try status().first(where: { $0.identifier == id }) else { throw HarnessError("no \(id) in status") }
        return p
    }

    /// Calls and decodes a JSON result.
    func call<T: Decodable>(_ id: String, _ method: String, _ params: String? = nil, as: T.Type) throws -> T {
        let r = try cli(["call", id, method] + (params.map { [$0] } ?? []))
        guard r.code == 0 else { throw HarnessError("call \(id) \(method) failed (\(r.code)): \(r.err)") }
        return try JSONDecoder().decode(T.self, from: Data(r.out.utf8))
    }

    func signal(_ sig: Int32) { kill(pid, sig) }

    /// Waits for the process to end; returns its exit status.
    func waitForExit(timeout: TimeInterval = 20) throws -> Int32 {
        try waitUntil(timeout: timeout, "exit") { !process.isRunning }
        process.waitUntilExit()
        return process.terminationStatus
    }
}

/// What a background client thread saw, and the flag that stops it. Read and written under its
/// lock only: the test process is instrumented too in the TSan run, and a thread's `isFinished`
/// does not order memory for the sanitizer.
final class Tally: @unchecked Sendable {
    private let lock = NSLock()
    private var ok = 0
    private var unavailable = 0
    private var failures: [String] = []
    private var stop = false

    var stopped: Bool { lock.withLock { stop } }
    func finish() { lock.withLock { stop = true } }
    func add(ok: Bool = false, unavailable: Bool = false, failure: String? = nil) {
        lock.withLock {
            if ok { self.ok += 1 }
            if unavailable { self.unavailable += 1 }
            if let failure { failures.append(failure) }
        }
    }
    var seen: (ok: Int, unavailable: Int, failures: [String]) { lock.withLock { (ok, unavailable, failures) } }
}

/// What TestKit's `info` method returns.
struct KitInfo: Decodable {
    struct Stamp: Decodable { var event: String; var at: UInt64 }
    var identifier: String
    var pid: Int32
    var events: [Stamp]

    func time(of event: String) -> UInt64? { events.first { $0.event == event }?.at }
    var names: [String] { events.map(\.event) }
}

extension RunningSupervisor {
    func info(_ id: String) throws -> KitInfo { try call(id, "info", as: KitInfo.self) }
}

/// A TCP socket bound to 127.0.0.1 on a port the kernel chose (a bind to port 0), and that port.
func localTCPSocket() throws -> (fd: Int32, port: Int) {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw HarnessError("socket: \(String(cString: strerror(errno)))") }
    var addr = sockaddr_in()
    addr.sin_family = sa_family_t(AF_INET)
    addr.sin_addr.s_addr = inet_addr("127.0.0.1")
    addr.sin_port = 0
    var size = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, size) } }
    let named = bound == 0 ? withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &size) } } : -1
    guard named == 0 else {
        let e = errno
        close(fd)
        throw HarnessError("binding a local TCP socket: \(String(cString: strerror(e)))")
    }
    return (fd, Int(UInt16(bigEndian: addr.sin_port)))
}

/// A TCP port on 127.0.0.1 that nothing listens on, released for the caller to bind. (A port made
/// from the pid once fell on one in use: EADDRINUSE.)
func freeLocalPort() throws -> Int {
    let (fd, port) = try localTCPSocket()
    close(fd)
    return port
}

/// A raw client on the control socket, for protocol-level tests.
/// `json` as one frame: its length (4 bytes, big-endian), then its bytes as they are.
func framed(_ json: String) -> [UInt8] {
    let body = Array(json.utf8)
    return withUnsafeBytes(of: UInt32(body.count).bigEndian, Array.init) + body
}

func rawControl(_ path: String) throws -> BlockingConnection {
    try BlockingConnection.connect(path: path)
}

/// A `call` frame for a raw control connection.
func callFrame(id: UInt64, target: String, method: String, params: String? = nil, timeoutMs: UInt64? = nil,
               traceparent: String? = nil) -> [UInt8] {
    var b = FrameBuilder(kind: .call)
    b.uint("id", id)
    b.string("target", target)
    b.string("method", method)
    if let params { b.raw("params", Array(params.utf8)) }
    if let timeoutMs { b.uint("timeoutMs", timeoutMs) }
    if let traceparent { b.string("traceparent", traceparent) }
    return b.finish()
}

/// Calls `target`'s `echo` over one control connection until told to stop; each reply must be the
/// echo, or (when `unavailableAllowed`) an `unavailable` error.
/// With `via`, each echo is a plugin-to-plugin call: `via`'s `call` method calls `target`.
func echoCaller(_ socket: String, _ target: String, via: String? = nil, unavailableAllowed: Bool, _ tally: Tally) -> Thread {
    Thread {
        let conn: BlockingConnection
        do { conn = try BlockingConnection.connect(path: socket) } catch {
            return tally.add(failure: "cannot connect: \(error)")
        }
        defer { conn.close() }
        var id: UInt64 = 0
        while !tally.stopped {
            id += 1
            do {
                if let via {
                    try conn.sendFrame(callFrame(id: id, target: via, method: "call", params: #"{"target":"\#(target)","method":"echo","params":[\#(id)]}"#))
                } else {
                    try conn.sendFrame(callFrame(id: id, target: target, method: "echo", params: "[\(id)]"))
                }
                let text = String(decoding: try conn.receiveFrame() ?? [], as: UTF8.self)
                if text.contains("\"result\":[\(id)]") {
                    tally.add(ok: true)
                } else if unavailableAllowed, text.contains("\"code\":\"unavailable\"") {
                    tally.add(unavailable: true)
                } else {
                    tally.add(failure: text)
                }
            } catch {
                return tally.add(failure: "\(error)")
            }
        }
    }
}

/// Work on a thread of its own (a CLI command that blocks while the test watches what happens
/// meanwhile); `wait` takes its result.
final class Background<T: Sendable>: @unchecked Sendable {
    // @unchecked: `result` is written once on the thread and read under the same lock.
    private let lock = NSLock()
    private var result: Result<T, any Error>?

    init(_ work: @escaping @Sendable () throws -> T) {
        let thread = Thread { [self] in
            let r = Result { try work() }
            lock.withLock { result = r }
        }
        thread.start()
    }

    /// What the work came to, if it has finished (without waiting).
    var finished: Result<T, any Error>? { lock.withLock { result } }

    func wait(timeout: TimeInterval = 60) throws -> T {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let r = lock.withLock({ result }) { return try r.get() }
            usleep(10_000)
        }
        throw HarnessError("the background work did not finish within \(timeout) s")
    }
}

/// The next host event that `matches` from `events` (an embedded host's or a client's), up to
/// `seconds`.
func nextEvent<Events: AsyncIteratorProtocol>(_ events: inout Events, within seconds: Double = 15, _ what: String,
                                               _ matches: (HostEvent) -> Bool) async throws -> HostEvent where Events.Element == HostEvent {
    let deadline = ContinuousClock.now + .seconds(seconds)
    while ContinuousClock.now < deadline {
        guard let event = try await events.next() else { break }
        if matches(event) { return event }
    }
    throw HarnessError("no \(what) event within \(seconds) s")
}

/// Calls from four lanes, each checking its answer, while `work` runs (a restart, an update): once
/// calls flow, `work`, then until calls flow again. Returns how many failed or came back wrong.
func failedCalls(lanes: Int = 4, _ echo: @escaping @Sendable (Int) async throws -> Int, during work: () async throws -> Void) async throws -> Int {
    final class Tally: Sendable {
        let stop = Atomic<Bool>(false)
        let failures = Atomic<Int>(0)
        let answered = Atomic<Int>(0)
    }
    let tally = Tally()
    let running = (0..<lanes).map { lane in
        Task {
            var n = 0
            while !tally.stop.load(ordering: .relaxed) {
                n += 1
                let sent = lane * 1_000_000 + n
                if (try? await echo(sent)) == sent { tally.answered.add(1, ordering: .relaxed) } else { tally.failures.add(1, ordering: .relaxed) }
            }
        }
    }
    try await waitUntil("calls to flow") { tally.answered.load(ordering: .relaxed) > 200 }
    try await work()
    let after = tally.answered.load(ordering: .relaxed)
    try await waitUntil("calls to flow after it") { tally.answered.load(ordering: .relaxed) > after + 200 }
    tally.stop.store(true, ordering: .relaxed)
    for lane in running { await lane.value }
    return tally.failures.load(ordering: .relaxed)
}

/// Holds the supervisor's event loop for `milliseconds` (`debugWedge`, debug builds), once it has
/// answered: what goes over a direct link meanwhile does not pass through it.
func holdLoop(_ socket: String, milliseconds: UInt64) throws {
    let wedge = try rawControl(socket)
    defer { wedge.close() }
    var frame = FrameBuilder(kind: .debugWedge)
    frame.uint("id", 1)
    frame.uint("timeoutMs", milliseconds)
    try wedge.sendFrame(frame.finish())
    _ = try wedge.receiveFrame()
}
