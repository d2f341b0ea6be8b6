#if canImport(Glibc)
import Glibc
#endif
import Foundation
import IPC
import PluginProtocol

/// Many plugins on one machine (SPEC §16): N copies of the C example plugin (sandbox on, fork
/// server), eager and on demand, beside go-plugin starting the same N.
/// `supervisor-bench --only scale [--plugins N] [--go-plugin HOST PLUGIN]` (default: the curve at
/// 50, 200, 500 and 1,000); docs/benchmarks.md "Many plugins".
enum ScaleBench {
    static func run(_ rig: Rig, _ report: Report, counts: [Int], quick: Bool, goPlugin: (host: String, plugin: String)?) throws {
        let library = try cExample(rig)
        let idleSeconds: UInt32 = quick ? 3 : 10
        for n in counts {
            note("scale: \(n) eager plugins")
            let dir = try folder(rig, "scale-\(n)", count: n, library: library)
            let ready = Double(try rig.start(plugins: dir)) / 1e6
            guard let supervisor = rig.process?.processIdentifier else { throw BenchError("no supervisor") }
            let supervisorCPU = (cpuSeconds(supervisor) ?? 0) * 1000
            let pids = try rig.status().compactMap(\.pid)
            let sample = Array(pids.shuffled().prefix(100))
            report.add("scale \(n): start → ready, eager", ready, "ms")
            report.add("scale \(n): supervisor CPU to ready, per plugin", supervisorCPU / Double(n), "ms")
            report.add("scale \(n): worker CPU to ready, median", median(sample.compactMap(cpuSeconds)) * 1000, "ms")
            // Idle: nothing calls; what the supervisor still does.
            sleep(2)
            let idle = idleCost(supervisor, seconds: idleSeconds)
            report.add("scale \(n): supervisor idle CPU", idle.percent, "% of a core", target: n == 1_000 ? "≤ 0.5 %" : nil)
            report.add("scale \(n): supervisor wake-ups, idle", idle.wakeups, "/s")
            report.add("scale \(n): supervisor RSS", Double(memory(supervisor).rss) / 1_048_576, "MiB")
            report.add("scale \(n): supervisor descriptors", Double(SoakBench.descriptors(supervisor)), "", target: "≤ 7 a worker + a reserve")
            report.add("scale \(n): worker PSS, median", median(sample.prefix(50).map { Double(memory($0).pss) / 1_048_576 }), "MiB")
            report.add("scale \(n): status --json (the CLI, start to end), median", try statusTime(rig), "ms", target: n == 1_000 ? "≤ 30 ms" : nil)
            let t0 = now()
            rig.stop()
            report.add("scale \(n): stop (SIGTERM → the supervisor's exit)", Double(now() - t0) / 1e6, "ms", target: n == 1_000 ? "≤ 500 ms" : nil)
            if let goPlugin { try goPluginScale(goPlugin, n, report) }
        }
        guard let n = counts.max() else { return }
        try onCall(rig, report, n: n, library: library, idleSeconds: idleSeconds)
    }

    /// Plugins that start when called (SPEC §16): ready with all of them inactive, the first call to
    /// one, a call after its idle stop, and a mix of 5 % eager and 95 % on demand.
    static func onCall(_ rig: Rig, _ report: Report, n: Int, library: String, idleSeconds: UInt32) throws {
        note("scale: \(n) plugins on demand")
        let lazy = try folder(rig, "scale-oncall-\(n)", count: n, library: library) { _ in #","activation":"onCall""# }
        let ready = Double(try rig.start(plugins: lazy, config: #"{"idleStopMs": 400}"#)) / 1e6
        report.add("scale \(n) onCall: start → ready, all inactive", ready, "ms", target: n == 1_000 ? "≤ 100 ms" : nil)
        let conn = try rig.connect()
        defer { conn.close() }
        var first = Samples()
        for i in 0..<min(n, 20) {
            let t0 = now()
            try call(conn, id: UInt64(i + 1), target: "bench.s\(i * max(1, n / 20))")
            first.add(now() - t0)
        }
        report.add("scale \(n) onCall: first call to an inactive plugin, p50 (sandbox on)", first.median / 1000, "ms", target: "≤ 10 ms")
        // The first plugin called is stopped once idle for 400 ms; the next call starts it again.
        try rig.waitUntil("an idle stop") { try rig.status().first { $0.identifier == "bench.s0" }?.state == "inactive" }
        let t0 = now()
        try call(conn, id: 100, target: "bench.s0")
        report.add("scale \(n) onCall: a call after an idle stop", Double(now() - t0) / 1e6, "ms")
        rig.stop()

        // The mix a host with many rarely used plugins has: 5 % eager, the rest on demand.
        let eager = max(1, n / 20)
        let mixed = try folder(rig, "scale-mixed-\(n)", count: n, library: library) { i in i < eager ? "" : #","activation":"onCall""# }
        let mixedReady = Double(try rig.start(plugins: mixed)) / 1e6
        report.add("scale \(n) mixed (\(eager) eager, \(n - eager) onCall): start → ready", mixedReady, "ms", target: n == 1_000 ? "< 1000 ms" : nil)
        guard let supervisor = rig.process?.processIdentifier else { throw BenchError("no supervisor") }
        sleep(2)
        let idle = idleCost(supervisor, seconds: idleSeconds)
        report.add("scale \(n) mixed: supervisor idle CPU", idle.percent, "% of a core", target: n == 1_000 ? "< 0.5 %" : nil)
        rig.stop()
    }

    /// go-plugin's host starting the same number of its plugin processes (Benchmarks/goplugin, built
    /// by scripts/compare-goplugin.sh): its start, the plugins' memory, its stop.
    static func goPluginScale(_ go: (host: String, plugin: String), _ n: Int, _ report: Report) throws {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: go.host)
        p.arguments = ["-plugin", go.plugin, "-scale", String(n)]
        let out = Pipe()
        p.standardOutput = out
        p.standardError = FileHandle.nullDevice
        try p.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        guard p.terminationStatus == 0, let figures = try JSONSerialization.jsonObject(with: data) as? [String: Double] else {
            note("scale: go-plugin could not start \(n) plugins here (exit \(p.terminationStatus))")
            return
        }
        report.add("scale \(n): go-plugin start (\(n) in parallel)", figures["scaleStartMs"] ?? .nan, "ms")
        report.add("scale \(n): go-plugin plugin PSS, median", figures["scalePssMiB"] ?? .nan, "MiB")
        report.add("scale \(n): go-plugin host RSS", figures["scaleHostRssMiB"] ?? .nan, "MiB")
        report.add("scale \(n): go-plugin stop (kill all)", figures["scaleStopMs"] ?? .nan, "ms")
    }

    /// One call of the C example's `hello`, answered.
    static func call(_ conn: BlockingConnection, id: UInt64, target: String) throws {
        try conn.sendFrame(callFrame(id: id, target: target, method: "hello"))
        guard let reply = try conn.receiveFrame() else { throw BenchError("connection closed") }
        let failed = try reply.withUnsafeBytes { try Envelope.parse($0).error != nil }
        if failed { throw BenchError("\(target): \(String(decoding: reply, as: UTF8.self))") }
    }

    /// The supervisor's CPU (% of a core) and its threads' context switches a second over `seconds`.
    static func idleCost(_ pid: Int32, seconds: UInt32) -> (percent: Double, wakeups: Double) {
        let cpu0 = cpuSeconds(pid) ?? 0, switches0 = contextSwitches(pid)
        sleep(seconds)
        let cpu1 = cpuSeconds(pid) ?? 0, switches1 = contextSwitches(pid)
        return (100 * (cpu1 - cpu0) / Double(seconds), Double(switches1 - switches0) / Double(seconds))
    }

    /// Voluntary and involuntary context switches of every thread of `pid`.
    static func contextSwitches(_ pid: Int32) -> Int {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        return tasks.reduce(0) { total, task in
            let text = (try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/status", encoding: .utf8)) ?? ""
            // "voluntary_ctxt_switches:\tN" and "nonvoluntary_ctxt_switches:\tN"
            return total + text.split(separator: "\n").filter { $0.contains("ctxt_switches:") }
                .compactMap { Int($0.split(separator: "\t").last ?? "") }.reduce(0, +)
        }
    }

    /// `supervisor status --json` as a user runs it (the CLI's own start included; posix_spawn and
    /// waitpid, not Foundation's Process, whose own start-up costs tens of milliseconds): the median of 5.
    static func statusTime(_ rig: Rig) throws -> Double {
        var runs = Samples()
        let argv = [rig.bin + "/supervisor", "status", "--json", "--home", rig.home]
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        for _ in 0..<5 {
            let cArgs = argv.map { strdup($0) } + [nil]
            defer { cArgs.forEach { free($0) } }
            var pid: pid_t = 0
            let t0 = now()
            guard posix_spawn(&pid, argv[0], &actions, nil, cArgs, environ) == 0 else { throw BenchError("cannot run \(argv[0])") }
            var status: Int32 = 0
            _ = waitpid(pid, &status, 0)
            runs.add(now() - t0)
        }
        return runs.median / 1000
    }

    /// A folder of `count` bundles of the C example, `bench.s0` … (`manifest(i)`: more fields for the i-th).
    static func folder(_ rig: Rig, _ name: String, count: Int, library: String, manifest: (Int) -> String = { _ in "" }) throws -> String {
        let dir = rig.root + "/" + name
        try? FileManager.default.removeItem(atPath: dir)
        for i in 0..<count {
            let bundle = dir + "/bench.s\(i)"
            try FileManager.default.createDirectory(atPath: bundle, withIntermediateDirectories: true)
            if link(library, bundle + "/libchello.so") != 0 { try FileManager.default.copyItem(atPath: library, toPath: bundle + "/libchello.so") }
            try #"{"identifier":"bench.s\#(i)","version":"1.0.0","library":"libchello.so"\#(manifest(i))}"#
                .write(toFile: bundle + "/plugin.json", atomically: false, encoding: .utf8)
        }
        return dir
    }

    /// examples/CHello built with the system's C compiler (the plugin the figures are about).
    static func cExample(_ rig: Rig) throws -> String {
        guard let repository = repository(of: rig) else { throw BenchError("examples/CHello/chello.c not found above \(rig.bin): run this repository's build") }
        let source = repository + "/examples/CHello/chello.c"
        let output = rig.root + "/libchello.so"
        let cc = Process()
        cc.executableURL = URL(fileURLWithPath: "/usr/bin/cc")
        cc.arguments = ["-shared", "-fPIC", "-O2", "-I", repository + "/SDK/Sources/CPluginABI/include", "-o", output, source]
        try cc.run()
        cc.waitUntilExit()
        guard cc.terminationStatus == 0 else { throw BenchError("cc could not build \(source)") }
        return output
    }

    /// The repository this build is in: the first folder above the binaries with the C example.
    static func repository(of rig: Rig) -> String? {
        var folder = URL(fileURLWithPath: rig.bin)
        while folder.path != "/" {
            folder.deleteLastPathComponent()
            if FileManager.default.fileExists(atPath: folder.path + "/examples/CHello/chello.c") { return folder.path }
        }
        return nil
    }
}
