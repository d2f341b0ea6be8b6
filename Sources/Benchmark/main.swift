// supervisor-bench: the product's speed on real binaries and plugins, each figure beside a baseline
// measured in the same run (docs/benchmarks.md).
//
//   swift build -c release && .build/release/supervisor-bench [--json] [--quick]
import Foundation
import IPC
import PluginProtocol
import Synchronization

let arguments = CommandLine.arguments
BenchArguments.check(arguments)
let asJSON = arguments.contains("--json")
let quick = arguments.contains("--quick")
let calls = quick ? 2_000 : 20_000
/// `--only calls|sdk|client|host|streams|bytes|crash|upgrade|startup` runs one section (`sdk`, `soak` and
/// `scale` only when asked: `--only sdk [--baseline-lib PATH] [--rounds N]`, `--only soak [--minutes N] [--links]`,
/// `--only scale [--plugins N]`).
let only: String? = arguments.firstIndex(of: "--only").flatMap { $0 + 1 < arguments.count ? arguments[$0 + 1] : nil }
func wanted(_ section: String) -> Bool { only == section || (only == nil && section != "sdk") }
/// `--worker-start exec|fork-server`: how the workers of every section start (default: the
/// supervisor's default; the start-up section measures both either way).
let defaultWorkerStart: String? = arguments.firstIndex(of: "--worker-start").flatMap { $0 + 1 < arguments.count ? arguments[$0 + 1] : nil }
/// `--no-peer-links`: the calls section's supervisor routes every plugin → plugin call itself
/// (`peerLinks: false`), to compare with the direct links between workers (the default).
let peerLinks = !arguments.contains("--no-peer-links")
/// `--link-poll-us N`: the program's direct links poll this long for a reply before they sleep
/// (PluginHost.Configuration.linkPollMicroseconds, SupervisorClient.connect's), for before/after
/// runs of one build; default: the libraries' own default.
let linkPollMicroseconds = arguments.firstIndex(of: "--link-poll-us").flatMap { $0 + 1 < arguments.count ? Int(arguments[$0 + 1]) : nil }
let report = Report()
func note(_ s: String) { FileHandle.standardError.write((s + "\n").data(using: .utf8)!) }

do {
    let rig = try Rig()
    /// Figures the embedded host's rows are set beside (from the calls section, when it ran).
    var oneHopBaseline: (p50: Double, tput: [Int: Double])?
    var supervisorThroughput64: Double?

    // 1-2. Call latency and throughput, against raw socketpair echoes of the same frame.
    if wanted("calls") {
    note("calls: baselines")
    let frame = { (id: UInt64) in callFrame(id: id, target: "bench.callee", method: "ping") }
    var base: [Int: (p50: Double, tput: [Int: Double])] = [:]
    for hops in [1, 2] {
        let echo = Baselines.Echo(hops: hops)
        _ = try latency(echo.client, count: 500, frame: frame)
        let lat = try latency(echo.client, count: calls, frame: frame)
        var tput: [Int: Double] = [:]
        for c in [1, 16, 64] { tput[c] = try throughput(echo.client, inFlight: c, count: calls * 2, frame: frame) }
        echo.stop()
        base[hops] = (lat.median, tput)
        if hops == 1 { oneHopBaseline = (lat.median, tput) }
        report.add("baseline: socketpair echo, \(hops) hop\(hops == 1 ? "" : "s"), p50", lat.median, "µs")
        report.add("baseline: socketpair echo, \(hops) hop\(hops == 1 ? "" : "s"), 64 in flight", tput[64]!, "/s")
    }
    let json = Baselines.jsonCost(iterations: quick ? 2_000 : 20_000)
    report.add("baseline: JSON encode+decode of the call message", json, "µs")

    note("calls: through the supervisor")
    let callPlugins = try rig.plugins("calls", count: 0, extra: ["bench.callee", "bench.caller", "bench.crelay"])
    let twoHop = base[2]!
    /// Host calls: p50 and percentiles, throughput at 1, 16 and 64 in flight, and the supervisor's
    /// and the worker's CPU per call at 1 and at 64 in flight. `label` is added to every name.
    func hostCalls(_ conn: BlockingConnection, _ label: String) throws -> (lat: Samples, throughput64: Double) {
        _ = try latency(conn, count: 500, frame: frame)
        let lat = try latency(conn, count: calls, frame: frame)
        report.add("call p50 (CLI socket → supervisor → worker → back)\(label)", lat.median, "µs", baseline: ("2-hop p50", twoHop.p50), target: "≤ 2×")
        report.add("call p99\(label)", lat.percentile(0.99), "µs", baseline: ("2-hop p50", twoHop.p50))
        report.add("call p99.9\(label)", lat.percentile(0.999), "µs", baseline: ("2-hop p50", twoHop.p50))
        let calleePID = try rig.status().first(where: { $0.identifier == "bench.callee" })?.pid
        var throughput64 = 0.0
        for c in [1, 16, 64] {
            let cpuBefore = rig.process.flatMap { cpuSeconds($0.processIdentifier) }
            let workerBefore = calleePID.flatMap { cpuSeconds($0) }
            let count = calls * (c == 1 ? 1 : 3)
            let t = try throughput(conn, inFlight: c, count: count, frame: frame)
            if c == 64 { throughput64 = t }
            report.add("call throughput, \(c) in flight\(label)", t, "/s", baseline: ("2-hop", twoHop.tput[c]!), target: c == 64 ? "≥ 60000/s" : nil)
            // The supervisor's own CPU per call: steadier than throughput on a busy or shared machine,
            // so the figure to compare when the routing path changes. At 1 in flight the worker's
            // shows what polling before sleeping costs (`workerSpinMicroseconds`).
            guard c != 16 else { continue }
            if let before = cpuBefore, let after = rig.process.flatMap({ cpuSeconds($0.processIdentifier) }) {
                report.add("supervisor CPU per call, \(c) in flight\(label)", (after - before) / Double(count) * 1e6, "µs")
            }
            if let before = workerBefore, let after = calleePID.flatMap({ cpuSeconds($0) }) {
                report.add("worker CPU per call, \(c) in flight\(label)", (after - before) / Double(count) * 1e6, "µs")
            }
        }
        return (lat, throughput64)
    }
    // The host call with workers that poll 100 µs before they sleep (`workerSpinMicroseconds`, off by
    // default): what a woken CPU costs on this machine, and what polling buys and burns.
    try rig.start(plugins: callPlugins, config: #"{"workerSpinMicroseconds": 100, "peerLinks": \#(peerLinks)}"#)
    let polling = try rig.connect()
    _ = try hostCalls(polling, ", workers polling 100 µs")
    polling.close()
    try rig.start(plugins: callPlugins, config: peerLinks ? nil : #"{"peerLinks": false}"#)
    let conn = try rig.connect()
    let (lat0, hostThroughput64) = try hostCalls(conn, "")
    supervisorThroughput64 = hostThroughput64
    // Plugin → plugin: the client asks a caller, which calls bench.callee (over a peer link
    // between the two workers, or through the supervisor with --no-peer-links): bench.caller in
    // Swift, with TestKit's async `call` (its JSONValue params and result go through Foundation's
    // JSON coding) and with `pingVia` (the SDK's path alone: a string in, an Int out, plain
    // coding), and bench.crelay in C (Benchmarks/CRelay), without the Swift SDK's async path. Ratios against the host call above (the
    // targets: p50 ≤ 2×, throughput ≥ 0.5×).
    /// The caller's worker CPU per call with 64 in flight, by caller (the C relay's is the baseline
    /// of the Swift callers': the target is "≤ 1.5× the C relay's").
    var callerCPU: [String: Double] = [:]
    func nested(_ label: String, caller: String, _ frame: (UInt64) -> [UInt8]) throws {
        _ = try latency(conn, count: 200, frame: frame)
        let lat = try latency(conn, count: calls / 4, frame: frame)
        let suffix = label.hasPrefix(" (") ? "" : label
        report.add("plugin → plugin call p50\(label)", lat.median, "µs", baseline: ("host call p50", lat0.median), target: label.contains("Swift, typed") ? "≤ 1.6×" : "≤ 2×")
        report.add("plugin → plugin call p99\(suffix)", lat.percentile(0.99), "µs", baseline: ("host call p50", lat0.median))
        let callerPID = try rig.status().first(where: { $0.identifier == caller })?.pid
        let before = callerPID.flatMap { cpuSeconds($0) }
        report.add("plugin → plugin throughput, 64 in flight\(suffix)", try throughput(conn, inFlight: 64, count: calls, frame: frame), "/s",
                   baseline: ("host call, 64 in flight", hostThroughput64), target: "≥ 0.5×")
        if let before, let after = callerPID.flatMap({ cpuSeconds($0) }) {
            callerCPU[label] = (after - before) / Double(calls) * 1e6
        }
    }
    if peerLinks {
        // The first call of each caller goes through the supervisor and makes the link.
        _ = try latency(conn, count: 10, frame: { id in callFrame(id: id, target: "bench.caller", method: "call", params: #"{"target":"bench.callee","method":"ping"}"#) })
        _ = try latency(conn, count: 10, frame: { id in callFrame(id: id, target: "bench.crelay", method: "relay") })
        let linked = try rig.status().filter { $0.links == ["bench.callee"] }.count
        note("plugin → plugin: \(linked) of 2 callers linked to bench.callee")
    }
    try nested(" (client → A → B → A → client)", caller: "bench.caller") { id in
        callFrame(id: id, target: "bench.caller", method: "call", params: #"{"target":"bench.callee","method":"ping"}"#)
    }
    try nested(", caller in Swift, typed", caller: "bench.caller") { id in callFrame(id: id, target: "bench.caller", method: "pingVia", params: #""bench.callee""#) }
    try nested(", caller in Swift, typed, inline", caller: "bench.caller") { id in callFrame(id: id, target: "bench.caller", method: "pingViaInline", params: #""bench.callee""#) }
    try nested(", caller in C", caller: "bench.crelay") { id in callFrame(id: id, target: "bench.crelay", method: "relay") }
    let cRelayCPU = callerCPU[", caller in C"]
    for (label, name) in [(" (client → A → B → A → client)", ", Swift JSONValue relay"), (", caller in Swift, typed", ", Swift, typed"),
                          (", caller in Swift, typed, inline", ", Swift, typed, inline"), (", caller in C", ", C relay")] {
        guard let cpu = callerCPU[label] else { continue }
        let isC = label == ", caller in C"
        report.add("plugin → plugin: the caller's worker CPU per call, 64 in flight\(name)", cpu, "µs",
                   baseline: isC ? nil : cRelayCPU.map { ("the C relay's", $0) }, target: label.contains("Swift, typed") ? "≤ 1.5×" : nil)
    }
    conn.close()

    // 5. Memory of a trivial worker.
    if let pid = try rig.status().first(where: { $0.identifier == "bench.callee" })?.pid {
        let m = memory(pid)
        report.add("worker RSS (trivial Swift plugin)", Double(m.rss) / 1_048_576, "MiB")
        report.add("worker PSS (trivial Swift plugin, 2 workers)", Double(m.pss) / 1_048_576, "MiB", target: "< 8 MiB")
    }
    }

    // 2b. The Swift SDK's plugin → plugin path in interleaved rounds: the host call, the
    // Swift callers (a task, and an inline method) and the C relay, and with `--baseline-lib PATH`
    // (a libTestKit.so built from another commit) the same Swift callers built from that, so an SDK
    // change is measured before/after in one run, on the same supervisor and callee.
    if wanted("sdk") {
        note("sdk: plugin → plugin, interleaved")
        let baselineLib = arguments.firstIndex(of: "--baseline-lib").flatMap { $0 + 1 < arguments.count ? arguments[$0 + 1] : nil }
        var ids = ["bench.callee", "bench.caller", "bench.crelay"]
        if baselineLib != nil { ids.append("bench.before") }
        let dir = try rig.plugins("sdk", count: 0, extra: ids, libraries: baselineLib.map { ["bench.before": $0] } ?? [:])
        try rig.start(plugins: dir, config: peerLinks ? nil : #"{"peerLinks": false}"#)
        let conn = try rig.connect()
        struct Case { var label: String; var target: String; var method: String; var params: String? }
        var cases = [Case(label: "host call", target: "bench.callee", method: "ping"),
                     Case(label: "Swift caller, typed", target: "bench.caller", method: "pingVia", params: #""bench.callee""#),
                     Case(label: "Swift caller, typed, inline", target: "bench.caller", method: "pingViaInline", params: #""bench.callee""#),
                     Case(label: "C relay", target: "bench.crelay", method: "relay")]
        if baselineLib != nil {
            cases.insert(Case(label: "baseline build: host call", target: "bench.before", method: "ping"), at: 1)
            cases.insert(Case(label: "baseline build: Swift caller, typed", target: "bench.before", method: "pingVia", params: #""bench.callee""#), at: 4)
            cases.insert(Case(label: "baseline build: Swift caller, typed, inline", target: "bench.before", method: "pingViaInline", params: #""bench.callee""#), at: 5)
        }
        let pids = Dictionary(uniqueKeysWithValues: try rig.status().map { ($0.identifier, $0.pid ?? 0) })
        for c in cases { _ = try latency(conn, count: 300, frame: { callFrame(id: $0, target: c.target, method: c.method, params: c.params) }) }
        let linked = try rig.status().filter { $0.links == ["bench.callee"] }.map(\.identifier).sorted()
        note("sdk: linked to bench.callee: \(linked.joined(separator: ", "))")
        var p50: [String: [Double]] = [:], tput: [String: [Double]] = [:], cpu: [String: [Double]] = [:]
        let rounds = arguments.firstIndex(of: "--rounds").flatMap { $0 + 1 < arguments.count ? Int(arguments[$0 + 1]) : nil } ?? (quick ? 2 : 5)
        for round in 0..<rounds {
            note("sdk: round \(round + 1)")
            // Each round starts one case later, so no case always runs right after another (in one
            // fixed order two identical callers differed by 12–30 %).
            for c in cases[(round % cases.count)...] + cases[..<(round % cases.count)] {
                let frame = { (id: UInt64) in callFrame(id: id, target: c.target, method: c.method, params: c.params) }
                p50[c.label, default: []].append(try latency(conn, count: calls / 8, frame: frame).median)
                let pid = pids[c.target] ?? 0
                let before = cpuSeconds(pid)
                let n = calls / 2
                tput[c.label, default: []].append(try throughput(conn, inFlight: 64, count: n, frame: frame))
                if let before, let after = cpuSeconds(pid) { cpu[c.label, default: []].append((after - before) / Double(n) * 1e6) }
            }
        }
        let host = (p50: median(p50["host call"]), tput: median(tput["host call"]))
        let cRelayCPU = median(cpu["C relay"])
        for c in cases {
            let isSwift = c.label.contains("Swift")
            report.add("sdk: \(c.label), p50, median of rounds", median(p50[c.label]), "µs",
                       baseline: c.label == "host call" ? nil : ("host call p50", host.p50), target: isSwift ? "≤ 1.6×" : nil)
            report.add("sdk: \(c.label), 64 in flight", median(tput[c.label]), "/s",
                       baseline: c.label == "host call" ? nil : ("host calls", host.tput), target: isSwift ? "≥ 0.5×" : nil)
            report.add("sdk: \(c.label), the \(c.label.hasSuffix("host call") ? "callee" : "caller")'s worker CPU per call, 64 in flight", median(cpu[c.label]), "µs",
                       baseline: isSwift ? ("the C relay's", cRelayCPU) : nil, target: isSwift ? "≤ 1.5×" : nil)
        }
        conn.close()
    }

    // 3a. A program's SupervisorClient: its tasks' calls on one connection to the supervisor above.
    if wanted("client") {
        note("calls: a SupervisorClient")
        if !wanted("calls") {
            try rig.start(plugins: try rig.plugins("client", count: 0, extra: ["bench.callee"]))
        }
        let figures = try ClientBench.run(socket: rig.socket, calls: calls, supervisorPID: rig.supervisorPID)
        report.addCalls("SupervisorClient", figures, path: "task → worker over its direct link → back", hostCPU: "the supervisor's",
                        oneHop: oneHopBaseline?.p50, through: supervisorThroughput64.map { ("host calls through the supervisor (blocking client)", $0) })
        let through = try ClientBench.throughSupervisor(socket: rig.socket, calls: calls / 4)
        report.add("SupervisorClient call p50 without direct links (task → supervisor → worker → back)", through.median, "µs",
                   baseline: oneHopBaseline.map { ("1-hop echo p50", $0.p50) })
        report.add("SupervisorClient: this process's CPU per call, one call a millisecond", figures.programCPUPerPacedCall, "µs")
    }

    // 3b. The embedded host (PluginHost in this process): one hop, from a task to the worker's
    // socket. Against the 1-hop socketpair echo and the host call through the supervisor above.
    if wanted("host") {
        note("calls: an embedded PluginHost")
        rig.stop()
        let figures = try EmbeddedHostBench.run(rig: rig, calls: calls)
        // Ratios only against what this run measured (`--only host` has no calls section).
        report.addCalls("embedded host", figures, path: "task → worker → back, one hop", hostCPU: "this process's",
                        oneHop: oneHopBaseline?.p50, through: supervisorThroughput64.map { ("host calls through the supervisor", $0) })
        report.add("embedded host: this process's CPU per call, one call a millisecond", figures.programCPUPerPacedCall, "µs")
    }

    // 3c. Streams (SPEC §13): 64 KiB elements from a plugin to a program through the supervisor,
    // and a slow reader of a fast producer.
    if wanted("streams") {
        note("streams: plugin → SupervisorClient")
        let worker = try rig.restartWithCallee("streams")
        let figures = try StreamBench.run(socket: rig.socket, supervisorPID: rig.supervisorPID, workerPID: worker, quick: quick)
        report.add("stream throughput, 64 KiB elements, plugin → SupervisorClient", figures.megabytesPerSecond, "MB/s")
        report.add("stream throughput, 64 KiB elements of raw bytes, plugin → SupervisorClient", figures.bytesMegabytesPerSecond, "MB/s")
        report.add("  stream: the supervisor's CPU per MB", figures.supervisorCPUPerMB, "ms")
        report.add("  stream: the worker's CPU per MB", figures.workerCPUPerMB, "ms")
        let slow = figures.slowReader
        report.add("slow reader (1 MiB/s for \(Int(slow.seconds)) s, \(Int(slow.megabytesRead)) MB read): supervisor RSS growth", Double(slow.supervisorKiB) / 1024, "MiB", target: "< 8 MiB")
        report.add("slow reader: worker RSS growth", Double(slow.workerKiB) / 1024, "MiB", target: "< 8 MiB")
        report.add("slow reader: reader (this process) RSS growth", Double(slow.readerKiB) / 1024, "MiB", target: "< 8 MiB")
    }

    // 3d. Bytes (SPEC §13): a 1 MiB and a 256 MiB result passed as a sealed memfd to a program.
    if wanted("bytes") {
        note("bytes: plugin → SupervisorClient")
        let worker = try rig.restartWithCallee("bytes")
        let figures = try BytesBench.run(socket: rig.socket, supervisorPID: rig.supervisorPID, workerPID: worker, quick: quick)
        report.add("1 MiB bytes result, call p50 (plugin → SupervisorClient, memfd)", figures.oneMiB.median, "µs")
        report.add("1 MiB bytes result, call p99", figures.oneMiB.percentile(0.99), "µs")
        let big = figures.big
        report.add("256 MiB bytes result, call time", big.ns / 1e6, "ms", baseline: ("one memcpy of 256 MiB", big.memcpyNs / 1e6), target: "≤ 2×")
        report.add("  256 MiB result: supervisor peak RSS growth", Double(big.supervisorKiB) / 1024, "MiB", target: "< 4 MiB")
        report.add("  256 MiB result: worker peak RSS growth", Double(big.workerKiB) / 1024, "MiB")
        report.add("  256 MiB result: reader (this process) RSS growth, mapped and read", Double(big.readerKiB) / 1024, "MiB")
    }

    // 4. Crash → serving again, first (immediate) restart (CrashBench.swift).
    if wanted("crash") { try CrashBench.run(rig, report, quick: quick) }

    // Many plugins (ScaleBench.swift): asked for only (`--only scale [--plugins N] [--go-plugin HOST PLUGIN]`);
    // go-plugin's figures when its host and plugin are given, or built by scripts/compare-goplugin.sh.
    if only == "scale" {
        let counts = arguments.firstIndex(of: "--plugins").flatMap { $0 + 1 < arguments.count ? Int(arguments[$0 + 1]) : nil }.map { [$0] }
            ?? [50, 200, 500, 1_000]
        let built = (ScaleBench.repository(of: rig) ?? rig.bin) + "/.build/compare"
        var go: (host: String, plugin: String)? = FileManager.default.isExecutableFile(atPath: built + "/goplugin-host")
            ? (built + "/goplugin-host", built + "/goplugin-plugin") : nil
        if let i = arguments.firstIndex(of: "--go-plugin"), i + 2 < arguments.count { go = (arguments[i + 1], arguments[i + 2]) }
        try ScaleBench.run(rig, report, counts: counts, quick: quick, goPlugin: go)
    }

    // Calls that survive crashes, over minutes (SoakBench.swift): asked for only (`--only soak`).
    if only == "soak" {
        let minutes = arguments.firstIndex(of: "--minutes").flatMap { $0 + 1 < arguments.count ? Double(arguments[$0 + 1]) : nil } ?? 1
        try SoakBench.run(rig, report, minutes: minutes, links: arguments.contains("--links"))
    }

    // The supervisor upgraded in place while four clients call through it (UpgradeBench.swift).
    if wanted("upgrade") { try UpgradeBench.run(rig, report, quick: quick) }

    // 3. Start-up to ready, and a worker's own start split into phases.
    if wanted("startup") {
    note("start-up")
    for sandbox in [true, false] {
        for (count, chain) in [(1, false), (10, false), (10, true), (50, false), (50, true)] {
            let dir = try rig.plugins("start-\(count)-\(chain)", count: count, chain: chain)
            var runs = Samples()
            // The CPU each worker and the supervisor spent from their start to the ready line (the
            // target: ≤ 1.5 ms a worker), read at once after it; the medians of the runs.
            var workerCPU: [Double] = [], supervisorCPU: [Double] = []
            for _ in 0..<(quick ? 1 : 3) {
                runs.add(try rig.start(plugins: dir, sandbox: sandbox))
                if count == 50, !chain {
                    if let supervisor = cpuSeconds(rig.supervisorPID) { supervisorCPU.append(supervisor) }
                    workerCPU.append(median(try rig.status().compactMap(\.pid).compactMap(cpuSeconds)))
                }
            }
            let shape = count == 1 ? "" : (chain ? " (chain)" : " (wide)")
            report.add("start → ready, \(count) plugin\(count == 1 ? "" : "s")\(shape), sandbox \(sandbox ? "on" : "off")",
                       runs.median / 1000, "ms", target: count == 50 && sandbox ? "< 150 ms" : nil)
            if count == 50, !chain {
                let label = "50 plugins (wide), sandbox \(sandbox ? "on" : "off")"
                report.add("start CPU per worker to ready, \(label), median", median(workerCPU) * 1000, "ms", target: sandbox ? "≤ 1.5 ms" : nil)
                report.add("supervisor CPU to ready, \(label)", median(supervisorCPU) * 1000, "ms")
            }
            if sandbox, !chain, count == 50 {
                // The per-worker cgroup's share of it (docs/sandbox.md, "cgroups").
                var without = Samples()
                for _ in 0..<(quick ? 1 : 3) { without.add(try rig.start(plugins: dir, sandbox: true, config: #"{"workerCgroups": false}"#)) }
                report.add("start → ready, 50 plugins (wide), sandbox on, no worker cgroups", without.median / 1000, "ms")
            }
            if count == 1 {
                let t = try rig.status().first?.timings ?? [:]
                for phase in ["spawnUs", "sandboxUs", "sandbox.specUs", "sandbox.baseUs", "sandbox.cgroupUs", "sandbox.rlimitsUs", "sandbox.namespacesUs", "sandbox.landlockUs",
                              "sandbox.seccompUs", "loadUs", "helloUs", "startupUs"] where t[phase] != nil {
                    report.add("  1 worker, sandbox \(sandbox ? "on" : "off"): \(phase.dropLast(2))", Double(t[phase]!) / 1000, "ms")
                }
            }
            if sandbox, !chain, count == 1 || count == 50 {
                // The same start with each worker exec'd (`workerStart: "exec"`), and the fork
                // server's share of the default: the workers' own start split into phases.
                var execd = Samples()
                for _ in 0..<(quick ? 1 : 3) { execd.add(try rig.start(plugins: dir, sandbox: true, workerStart: "exec")) }
                report.add("start → ready, \(count) plugin\(count == 1 ? "" : "s")\(shape), sandbox on, exec start", execd.median / 1000, "ms",
                           baseline: ("fork-server start", runs.median / 1000))
                if count == 1 {
                    let t = try rig.status().first?.timings ?? [:]
                    for phase in ["spawnUs", "sandboxUs", "loadUs", "helloUs", "startupUs"] where t[phase] != nil {
                        report.add("  1 worker, sandbox on, exec start: \(phase.dropLast(2))", Double(t[phase]!) / 1000, "ms")
                    }
                } else {
                    let pss = try rig.status().compactMap(\.pid).map { Double(memory($0).pss) / 1_048_576 }
                    report.add("worker PSS with 50 workers, median, exec start", median(pss), "MiB")
                }
                _ = try rig.start(plugins: dir, sandbox: true)
            }
            if count == 50, !chain, sandbox {
                // 6. Lifecycle fan-out, and the supervisor's memory with 50 plugins.
                var fan = Samples()
                for _ in 0..<(quick ? 3 : 20) {
                    let t0 = now()
                    _ = try rig.request(.send) { $0.string("name", "memoryWarning") }
                    fan.add(now() - t0)
                }
                report.add("memoryWarning acknowledged by 50 plugins, median", fan.median / 1000, "ms")
                let m = memory(rig.supervisorPID)
                report.add("supervisor RSS with 50 plugins", Double(m.rss) / 1_048_576, "MiB")
                report.add("supervisor PSS with 50 plugins", Double(m.pss) / 1_048_576, "MiB")
                let pss = try rig.status().compactMap(\.pid).map { Double(memory($0).pss) / 1_048_576 }
                report.add("worker PSS with 50 workers, median", median(pss), "MiB", target: "< 8 MiB")
            }
        }
    }
    }
    rig.stop()
} catch {
    note("supervisor-bench: \(error)")
    exit(1)
}

if asJSON {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
    print(String(decoding: try encoder.encode(report.metrics), as: UTF8.self))
} else {
    report.printTable()
}

