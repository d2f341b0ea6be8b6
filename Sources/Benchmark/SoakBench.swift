#if canImport(Glibc)
import Glibc
#endif
import Foundation
import IPC
import PluginProtocol
import SupervisorClient
import Synchronization

/// Calls that survive crashes, over time (SPEC §15): 64 calls in flight through the supervisor to
/// four plugins' idempotent `echo` (eight connections, eight calls outstanding on each), while a
/// random one of the four workers is SIGKILLed every second. Reports the calls, the failures
/// (target 0), the latency of calls that were in flight across a kill against the others', and the
/// supervisor's memory and descriptors at the start and the end (flat). `links`: the same 64 calls
/// from eight `SupervisorClient`s (eight tasks each), which go over their direct links to the
/// workers, so a kill cuts calls off on links.
/// `supervisor-bench --only soak [--minutes N] [--links]` (default 1 minute); docs/benchmarks.md.
enum SoakBench {
    /// What the callers saw, under one lock.
    final class Seen: Sendable {
        struct State {
            var calls = 0
            var failures: [String] = []
            var steady = Samples()
            var crossed = Samples()
            /// When each plugin's worker was last killed, by plugin number.
            var kills: [Int: UInt64] = [:]
            /// Kills whose plugin has not answered a call sent after them, by plugin number; and the
            /// time from a kill to that first answer (crash → serving, as callers see it).
            var unanswered: [Int: UInt64] = [:]
            var serving = Samples()
        }
        let state = Mutex(State())
        let stop = Atomic(false)

        /// A call to plugin number `plugin` answered (`failure`: not as asked): its latency goes to
        /// `crossed` when its worker was killed while it was in flight, else to `steady`.
        func answered(plugin: Int, start: UInt64, end: UInt64, failure: String?) {
            state.withLock { s in
                s.calls += 1
                if let failure { s.failures.append(failure) }
                if s.kills[plugin].map({ $0 > start && $0 <= end }) ?? false { s.crossed.add(end - start) } else { s.steady.add(end - start) }
                // A call sent after the kill is answered by the next worker: the first one says
                // when that worker served (a reply the dead worker had sent may still come in first).
                if failure == nil, let killed = s.unanswered[plugin], start > killed {
                    s.serving.add(end - killed)
                    s.unanswered[plugin] = nil
                }
            }
        }
    }

    static func run(_ rig: Rig, _ report: Report, minutes: Double, links: Bool = false) throws {
        let how = links ? "over direct links" : "through the supervisor"
        let label = links ? "soak over links" : "soak"
        note("soak: 64 calls in flight \(how) to 4 plugins' idempotent echo, a random worker SIGKILLed every second, \(minutes) min")
        let plugins = try rig.plugins("soak", count: 4, manifest: #","idempotent":["echo"]"#)
        _ = try rig.start(plugins: plugins, config: #"{"restartLimit": 100000000, "restartBackoffBaseMs": 1, "restartBackoffMaxMs": 5}"#)
        guard let supervisor = rig.process?.processIdentifier else { throw BenchError("no supervisor") }
        let seen = Seen()
        let socket = rig.socket
        let callers = (0..<8).map { lane in
            Thread {
                do {
                    if links { try callOverLinks(lane: lane, socket: socket, seen) } else { try call(lane: lane, socket: socket, seen) }
                } catch {
                    seen.state.withLock { $0.failures.append("caller \(lane): \(error)") }
                }
            }
        }
        callers.forEach { $0.start() }
        // Warm: every plugin answered, then the baseline.
        try rig.waitUntil("calls to flow") { seen.state.withLock { $0.calls } > 2_000 }
        let fdsBefore = descriptors(supervisor), rssBefore = memory(supervisor).rss
        let end = now() + UInt64(minutes * 60e9)
        var kills = 0
        while now() < end {
            usleep(1_000_000)
            let running = try rig.status().filter { $0.state == "running" && $0.pid != nil }
            guard let victim = running.randomElement(), let pid = victim.pid, let number = Int(victim.identifier.dropFirst("bench.p".count)) else { continue }
            seen.state.withLock { s in
                let t = now()
                s.kills[number] = t
                s.unanswered[number] = t
            }
            kill(pid, SIGKILL)
            kills += 1
        }
        // Every plugin serving again, the callers' last calls answered.
        try rig.waitUntil("every plugin running") { try rig.status().allSatisfy { $0.state == "running" } }
        seen.stop.store(true, ordering: .relaxed)
        while callers.contains(where: { !$0.isFinished }) { usleep(10_000) }
        let fdsAfter = descriptors(supervisor), rssAfter = memory(supervisor).rss
        let s = seen.state.withLock { $0 }
        report.add("\(label): minutes", minutes, "min")
        report.add("\(label): workers SIGKILLed", Double(kills), "")
        report.add("\(label): calls answered", Double(s.calls), "")
        report.add("\(label): calls failed", Double(s.failures.count), "", target: "0")
        for failure in s.failures.prefix(3) { note("  failed: \(failure)") }
        report.add("\(label): call p50, no kill during it", s.steady.median / 1000, "ms")
        report.add("\(label): call p50, in flight across its worker's kill", s.crossed.median / 1000, "ms")
        report.add("\(label): call p99, in flight across its worker's kill", s.crossed.percentile(0.99) / 1000, "ms")
        report.add("\(label): calls in flight across their worker's kill", Double(s.crossed.values.count), "")
        report.add("\(label): kill → first answer to a call sent after it, p50", s.serving.median / 1000, "ms")
        report.add("\(label): a call's extra latency across its worker's kill, p50", (s.crossed.median - s.steady.median) / 1000, "ms",
                   target: "≤ kill → first answer + 1 ms")
        report.add("\(label): supervisor RSS, start → end", Double(rssAfter - rssBefore) / 1_048_576, "MiB", target: "flat")
        report.add("\(label): supervisor descriptors, start → end", Double(fdsAfter - fdsBefore), "", target: "flat")
        note("soak: supervisor RSS \(rssBefore >> 20) → \(rssAfter >> 20) MiB, descriptors \(fdsBefore) → \(fdsAfter)")
    }

    /// One connection with eight calls outstanding: each answer's latency goes to `crossed` when its
    /// plugin's worker was killed while it was in flight, else to `steady`.
    static func call(lane: Int, socket: String, _ seen: Seen) throws {
        let connection = try BlockingConnection.connect(path: socket)
        defer { connection.close() }
        var sent: [UInt64: UInt64] = [:]
        var next: UInt64 = 1
        func send() throws {
            let id = next
            next += 1
            sent[id] = now()
            try connection.sendFrame(callFrame(id: id, target: "bench.p\(Int(id) % 4)", method: "echo", params: "[\(id)]"))
        }
        for _ in 0..<8 { try send() }
        while !sent.isEmpty {
            guard let frame = try connection.receiveFrame() else { throw BenchError("the supervisor closed the connection") }
            let (id, ok, text) = frame.withUnsafeBytes { bytes -> (UInt64, Bool, String) in
                let env = try? Envelope.parse(bytes)
                let id = env?.id ?? 0
                let ok = env?.error == nil && env?.result.map { String(decoding: bytes[$0], as: UTF8.self) } == "[\(id)]"
                return (id, ok, ok ? "" : String(decoding: bytes, as: UTF8.self))
            }
            guard let start = sent.removeValue(forKey: id) else { throw BenchError("an answer to \(id), never asked") }
            seen.answered(plugin: Int(id) % 4, start: start, end: now(), failure: ok ? nil : text)
            if !seen.stop.load(ordering: .relaxed) { try send() }
        }
    }

    /// A `SupervisorClient` with eight tasks calling in a loop: after each plugin's first call its
    /// calls go over a direct link to its worker.
    static func callOverLinks(lane: Int, socket: String, _ seen: Seen) throws {
        let done = DispatchSemaphore(value: 0)
        let failure = Mutex<String?>(nil)
        Task {
            do {
                let client = try await SupervisorClient.connect(socket: socket)
                defer { client.close() }
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for slot in 0..<8 {
                        group.addTask {
                            var n = UInt64(slot)
                            while !seen.stop.load(ordering: .relaxed) {
                                n += 8
                                let id = UInt64(lane) << 40 | n
                                let plugin = Int(n % 4)
                                let start = now()
                                var problem: String?
                                do {
                                    let echoed = try await client.call("bench.p\(plugin)", "echo", [id], as: [UInt64].self)
                                    if echoed != [id] { problem = "echo \(id) answered \(echoed)" }
                                } catch {
                                    problem = "echo \(id): \(error)"
                                }
                                seen.answered(plugin: plugin, start: start, end: now(), failure: problem)
                            }
                        }
                    }
                    try await group.waitForAll()
                }
            } catch {
                failure.withLock { $0 = "\(error)" }
            }
            done.signal()
        }
        done.wait()
        if let failure = failure.withLock({ $0 }) { throw BenchError(failure) }
    }

    static func descriptors(_ pid: Int32) -> Int {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").count) ?? 0
    }
}
