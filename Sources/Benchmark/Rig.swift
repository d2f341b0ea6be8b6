import Foundation
import IPC
import PluginProtocol
import Protocol

/// Real supervisors over temporary homes and plugin folders, built from this build's binaries.
final class Rig {
    let bin: String
    let root: String
    var process: Process?
    var home = ""
    var socket: String { home + "/supervisor.sock" }

    init() throws {
        bin = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().deletingLastPathComponent().path
        root = NSTemporaryDirectory() + "sp-bench-\(getpid())"
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        guard FileManager.default.fileExists(atPath: bin + "/libTestKit.so") else {
            throw BenchError("\(bin)/libTestKit.so is missing: build with `swift build -c release` first")
        }
    }

    deinit {
        stop()
        try? FileManager.default.removeItem(atPath: root)
    }

    /// A plugin folder of `count` TestKit bundles: `wide` (independent) or a `chain` (each depends on the previous).
    /// `libraries`: a plugin's library copied from another path (a build of another commit), by id.
    func plugins(_ name: String, count: Int, chain: Bool = false, extra: [String] = [], libraries: [String: String] = [:],
                 manifest more: String = "") throws -> String {
        let dir = root + "/" + name
        try? FileManager.default.removeItem(atPath: dir)
        for i in 0..<count + extra.count {
            let id = i < count ? "bench.p\(i)" : extra[i - count]
            let bundle = dir + "/" + id
            try FileManager.default.createDirectory(atPath: bundle, withIntermediateDirectories: true)
            // bench.crelay is the C caller (Benchmarks/CRelay); every other one is TestKit.
            let library = id == "bench.crelay" ? "libCRelay.so" : "libTestKit.so"
            if let other = libraries[id] {
                try FileManager.default.copyItem(atPath: other, toPath: bundle + "/" + library)
            } else if link(bin + "/" + library, bundle + "/" + library) != 0 {
                try FileManager.default.copyItem(atPath: bin + "/" + library, toPath: bundle + "/" + library)
            }
            var deps = ""
            if chain, i > 0, i < count { deps = #","dependencies":["bench.p\#(i - 1)"]"# }
            if id == "bench.caller" || id == "bench.crelay" || id == "bench.before" { deps = #","dependencies":["bench.callee"]"# }
            try #"{"identifier":"\#(id)","version":"1.0.0","library":"\#(library)"\#(deps)\#(more)}"#
                .write(toFile: bundle + "/plugin.json", atomically: true, encoding: .utf8)
        }
        return dir
    }

    /// A supervisor again, with `bench.callee` alone (in folder `name`): its worker's pid.
    func restartWithCallee(_ name: String) throws -> Int32 {
        stop()
        try start(plugins: try plugins(name, count: 0, extra: ["bench.callee"]))
        return try status().first { $0.identifier == "bench.callee" }?.pid ?? 0
    }

    /// Starts `supervisor start` (`workerStart`: its `--worker-start`, else the default, the fork
    /// server) and returns the nanoseconds from launch to its ready line.
    @discardableResult
    func start(plugins: String, sandbox: Bool = true, config: String? = nil, workerStart: String? = nil) throws -> UInt64 {
        stop()
        home = root + "/home-\(UUID().uuidString.prefix(6))"
        let out = root + "/stdout"
        _ = FileManager.default.createFile(atPath: out, contents: nil)
        let p = Process()
        p.executableURL = URL(fileURLWithPath: bin + "/supervisor")
        var args = ["start", "--home", home, "--plugins", plugins, "--log-level", "warning"]
        if !sandbox { args.append("--no-sandbox") }
        if let mode = workerStart ?? defaultWorkerStart { args += ["--worker-start", mode] }
        if let config {
            let path = root + "/config.json"
            try config.write(toFile: path, atomically: true, encoding: .utf8)
            args += ["--config", path]
        }
        p.arguments = args
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: out))
        p.standardOutput = handle
        p.standardError = FileHandle.nullDevice
        let t0 = now()
        try p.run()
        process = p
        let fd = open(out, O_RDONLY)
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 512)
        var seen = ""
        while !seen.contains("ready") {
            let n = read(fd, &buffer, buffer.count)
            if n > 0 { seen += String(decoding: buffer[0..<n], as: UTF8.self); continue }
            guard p.isRunning else { throw BenchError("supervisor exited during start-up") }
            if now() - t0 > 60_000_000_000 { throw BenchError("supervisor not ready within 60 s") }
            usleep(200)
        }
        return now() - t0
    }

    func stop() {
        guard let p = process else { return }
        if p.isRunning {
            kill(p.processIdentifier, SIGTERM)
            p.waitUntilExit()
        }
        process = nil
    }

    var supervisorPID: Int32 { process?.processIdentifier ?? 0 }

    func connect() throws -> BlockingConnection { try BlockingConnection.connect(path: socket) }

    /// One control request; returns the raw result.
    func request(_ kind: MessageKind, _ fill: (inout FrameBuilder) -> Void = { _ in }) throws -> [UInt8] {
        let c = try connect()
        defer { c.close() }
        var b = FrameBuilder(kind: kind)
        b.uint("id", 1)
        fill(&b)
        try c.sendFrame(b.finish())
        guard let reply = try c.receiveFrame() else { throw BenchError("no reply") }
        return try reply.withUnsafeBytes { raw in
            let env = try Envelope.parse(raw)
            if let e = env.error { throw BenchError(String(decoding: raw[e], as: UTF8.self)) }
            return env.result.map { Array(raw[$0]) } ?? []
        }
    }

    func status() throws -> [PluginStatus] {
        try JSONDecoder().decode([PluginStatus].self, from: Data(try request(.status)))
    }

    /// Polls `condition` every millisecond, for up to 10 s.
    func waitUntil(_ what: String, _ condition: () throws -> Bool) throws {
        let deadline = now() + 10_000_000_000
        while try !condition() {
            guard now() < deadline else { throw BenchError("not within 10 s: \(what)") }
            usleep(1000)
        }
    }
}

struct BenchError: Error, CustomStringConvertible {
    var description: String
    init(_ d: String) { description = d }
}

/// Call frames for `target.method`, with an id patched in per call.
func callFrame(id: UInt64, target: String, method: String, params: String? = nil) -> [UInt8] {
    var b = FrameBuilder(kind: .call)
    b.uint("id", id)
    b.string("target", target)
    b.string("method", method)
    if let params { b.raw("params", Array(params.utf8)) }
    return b.finish()
}

/// Latency at concurrency 1: `count` calls one after the other.
func latency(_ conn: BlockingConnection, count: Int, frame: (UInt64) -> [UInt8]) throws -> Samples {
    var samples = Samples()
    samples.values.reserveCapacity(count)
    for i in 0..<count {
        let f = frame(UInt64(i + 1))
        let t0 = now()
        try conn.sendFrame(f)
        guard try conn.receive({ _ in true }) != nil else { throw BenchError("connection closed") }
        samples.add(now() - t0)
    }
    return samples
}

/// Throughput with `inFlight` calls outstanding on one connection, for `count` calls: calls/s.
func throughput(_ conn: BlockingConnection, inFlight: Int, count: Int, frame: (UInt64) -> [UInt8]) throws -> Double {
    var sent = 0, received = 0
    let t0 = now()
    while sent < min(inFlight, count) { sent += 1; try conn.sendFrame(frame(UInt64(sent))) }
    while received < count {
        guard try conn.receive({ _ in true }) != nil else { throw BenchError("connection closed") }
        received += 1
        if sent < count { sent += 1; try conn.sendFrame(frame(UInt64(sent))) }
    }
    return Double(count) / (Double(now() - t0) / 1e9)
}

/// Resident and proportional set sizes (bytes) of a process.
func memory(_ pid: Int32) -> (rss: Int, pss: Int) {
    guard let text = try? String(contentsOfFile: "/proc/\(pid)/smaps_rollup", encoding: .utf8) else { return (0, 0) }
    func field(_ name: String) -> Int {
        guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix(name + ":") }) else { return 0 }
        return (Int(line.split(separator: " ").dropFirst().first ?? "0") ?? 0) * 1024
    }
    return (field("Rss"), field("Pss"))
}

/// A process's CPU time so far (seconds), summed over its threads from /proc/<pid>/task/*/schedstat
/// (nanoseconds on the CPU; clock ticks would be too coarse to compare a routing change).
func cpuSeconds(_ pid: Int32) -> Double? {
    guard let tasks = try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task") else { return nil }
    var total: UInt64 = 0
    for task in tasks {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/schedstat", encoding: .utf8),
              let first = text.split(separator: " ").first, let ns = UInt64(first) else { continue }
        total += ns
    }
    return Double(total) / 1e9
}
