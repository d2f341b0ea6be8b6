#if canImport(Glibc)
import Glibc
#endif
import Foundation
import IPC
import PluginProtocol

/// Crash → serving again, first (immediate) restart: the time from the crash request (to a plugin
/// that has answered a call before) to the first answered call; by default (a standby spawned on
/// the crash's notice) and with a standby kept beside every running plugin (`standbyWorkers:
/// "always"`), one after the other. Each crash starts from a quiet machine. docs/benchmarks.md,
/// "Crash → serving".
enum CrashBench {
    static func run(_ rig: Rig, _ report: Report, quick: Bool) throws {
        for (label, config) in [("", nil), (", standbyWorkers always", #"{"standbyWorkers": "always"}"#)] {
            note("crash → serving again" + label)
            let crashPlugins = try rig.plugins("crash", count: quick ? 3 : 10)
            try rig.start(plugins: crashPlugins, config: config)
            let kept = config != nil
            var recovery = Samples()
            for i in 0..<(quick ? 3 : 10) {
                // Kept standbys are made after the supervisor is ready and after each restart (100 ms
                // later): the crash waits for all of them, a steady state.
                if kept { try rig.waitUntil("every plugin has a standby") { try rig.status().allSatisfy { $0.standbyPid != nil } } }
                // Each crash on a quiet machine (the last standby's sandbox, ~3 ms, done), in both runs.
                usleep(30_000)
                let id = "bench.p\(i)"
                let c = try rig.connect()
                // A serving plugin crashes, not a fresh worker on its first call: the same method is
                // called once first (answered: "unknown crash none"), so that the crash's own call
                // does not carry the first call's costs (the supervisor's first route to the worker,
                // the SDK's first decode of the method's parameters and its first task, ~0.4–0.6 ms),
                // which are no part of the restart.
                try c.sendFrame(callFrame(id: 1, target: id, method: "crash", params: #"{"how":"none"}"#))
                guard let warm = try c.receiveFrame(), String(decoding: warm, as: UTF8.self).contains("\"result\"") else {
                    throw BenchError("\(id) did not answer its first call")
                }
                let t0 = now()
                try c.sendFrame(callFrame(id: 2, target: id, method: "crash", params: #"{"how":"segv"}"#))
                _ = try c.receiveFrame()
                var n: UInt64 = 3
                while true {
                    try c.sendFrame(callFrame(id: n, target: id, method: "ping"))
                    let reply = try c.receiveFrame() ?? []
                    if String(decoding: reply, as: UTF8.self).contains("\"result\"") { break }
                    n += 1
                    usleep(200)
                }
                recovery.add(now() - t0)
                c.close()
            }
            report.add("crash → serving again (first restart)\(label), median", recovery.median / 1000, "ms", target: kept ? "≤ 3 ms" : "< 50 ms")
            // The restarted workers' own start (docs/architecture.md, "Restarts: the standby worker"): how
            // many were standbys, how long one waited at its gate for the crashed worker's exit to be
            // settled (0: the exit was settled before its sandbox was on; kept: since the plugin last
            // started), and its spawn → hello/startup.
            let restarted = try rig.status().filter { $0.restarts > 0 }.compactMap(\.timings)
            let standbys = restarted.filter { $0["standbyUs"] != nil }
            report.add("  restarts taken by a standby worker", Double(standbys.count), "of \(restarted.count)")
            // The worker's own timings, then from the supervisor's side: `load` sent → hello read →
            // startup answered.
            let own = kept ? [("dlopenUs", "`load` → dlopen done"), ("loadUs", "`load` → plugin loaded")]
                : [("standbyUs", "waited at its gate"), ("sandboxUs", "sandbox"), ("helloUs", "spawn → hello"), ("startupUs", "spawn → startup answered")]
            let phases: [(String, ([String: Int]) -> Int?)] = own.map { phase, what in (what, { $0[phase] }) }
                + [("loadOrderUs", "helloUs", "`load` sent → hello"), ("helloUs", "startupUs", "hello → startup answered")].map { from, to, what in
                    (what, { t in t[from].flatMap { a in t[to].map { $0 - a } } })
                }
            if kept {
                // What a kept standby costs: its memory, waiting at its gate (no plugin loaded).
                let pss = try rig.status().compactMap(\.standbyPid).map { Double(memory($0).pss) / 1_048_576 }
                if !pss.isEmpty { report.add("  kept standby PSS, median", median(pss), "MiB") }
            }
            for (what, value) in phases where !standbys.isEmpty {
                var phaseSamples = Samples()
                for t in standbys { if let v = value(t) { phaseSamples.add(UInt64(max(0, v)) * 1000) } }
                report.add("  restarted worker, median: \(what)", phaseSamples.median / 1000, "ms")
            }
        }
    }
}
