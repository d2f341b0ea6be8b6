import Dispatch
import Foundation
import Logging
import PluginHost
import SupervisorKit
import Synchronization

/// The embedded host's calls (SPEC §12, docs/host.md): a `PluginHost` in this process over one
/// TestKit callee, its calls straight from a task to the worker's socket (one hop).
struct EmbeddedHostFigures {
    var latency: Samples
    /// Calls/s with this many calls in flight (one task each, one after the other on it).
    var throughput: [Int: Double]
    /// This process's CPU per call (the host's tasks and the supervisor's loop) at 64 in flight.
    var hostCPUPerCall64: Double
    /// The callee's worker's CPU per call at 64 in flight (its links thread does the work): steadier
    /// than the throughput on this shared machine, so the figure to compare when the link's path changes.
    var workerCPUPerCall64: Double?
    /// This process's CPU per call with one call in flight (one task calling in a loop): where the
    /// links' polling for the next reply shows (`linkPollMicroseconds`).
    var programCPUPerCall1: Double
    /// … and with one call every millisecond (a program calling now and then: the polling's window
    /// should have closed).
    var programCPUPerPacedCall: Double
}

extension Report {
    /// The rows of a program's calls, each named after `who`: p50 along `path` (against the 1-hop
    /// echo's `oneHop`), p99, throughput at 1, 16 and 64 in flight (64 against `through`), and CPU
    /// per call: `hostCPU`'s and the worker's at 64 in flight, this process's at 1.
    func addCalls(_ who: String, _ figures: EmbeddedHostFigures, path: String, hostCPU: String,
                  oneHop: Double?, through: (String, Double)?) {
        add("\(who) call p50 (\(path))", figures.latency.median, "µs", baseline: oneHop.map { ("1-hop echo p50", $0) })
        add("\(who) call p99", figures.latency.percentile(0.99), "µs")
        for c in [1, 16, 64] {
            add("\(who) call throughput, \(c) in flight", figures.throughput[c]!, "/s", baseline: c == 64 ? through : nil)
        }
        add("\(who): \(hostCPU) CPU per call, 64 in flight", figures.hostCPUPerCall64, "µs")
        if let worker = figures.workerCPUPerCall64 { add("\(who): the worker's CPU per call, 64 in flight", worker, "µs") }
        add("\(who): this process's CPU per call, 1 in flight", figures.programCPUPerCall1, "µs")
    }
}

enum EmbeddedHostBench {
    /// 500 calls to warm up, then `calls` one at a time, each timed.
    static func latencies(_ calls: Int, _ call: () async throws -> Void) async throws -> Samples {
        for _ in 0..<500 { try await call() }
        var latency = Samples()
        latency.values.reserveCapacity(calls)
        for _ in 0..<calls {
            let t0 = now()
            try await call()
            latency.add(now() - t0)
        }
        return latency
    }

    /// µs of `process`'s CPU per call over `calls` calls since `before` (`cpuSeconds`).
    static func perCall(_ process: Int32?, since before: Double?, calls: Int) -> Double? {
        guard let process, let before, let after = cpuSeconds(process) else { return nil }
        return (after - before) / Double(calls) * 1e6
    }

    /// Runs on tasks of its own; the benchmark's sections are sequential code, so this one waits.
    static func run(rig: Rig, calls: Int) throws -> EmbeddedHostFigures {
        let folder = try rig.plugins("host", count: 0, extra: ["bench.callee"])
        var configuration = PluginHost.Configuration(pluginFolders: [folder], home: rig.root + "/host-home")
        configuration.binaries = rig.bin
        configuration.controlSocket = false
        if let us = linkPollMicroseconds { configuration.linkPollMicroseconds = us }
        if let mode = defaultWorkerStart, let start = SupervisorConfig.WorkerStart(rawValue: mode) { configuration.workerStart = start }
        var logger = Logger(label: "bench-host")
        logger.logLevel = .error
        let host = PluginHost(configuration: configuration, logger: logger)
        return try waitFor {
            let running = Task { try await host.run() }
            let figures: Result<EmbeddedHostFigures, any Error>
            do {
                try await host.waitUntilReady()
                figures = .success(try await measure(host, calls: calls))
            } catch {
                figures = .failure(error)
            }
            await host.shutdown()
            _ = try? await running.value
            return try figures.get()
        }
    }

    private static func measure(_ host: PluginHost, calls: Int) async throws -> EmbeddedHostFigures {
        let worker = try await host.status().first { $0.identifier == "bench.callee" }?.pid
        return try await measureCalls(calls, cpuOf: getpid(), worker: worker) { _ = try await host.callJSON("bench.callee", "ping", params: nil) }
    }

    /// A program's calls (`call`): 500 to warm up, then `calls` one at a time for the latency, then
    /// 1, 16 and 64 tasks each calling in a loop; `cpuOf`'s and `worker`'s CPU per call at 64 in flight.
    static func measureCalls(_ calls: Int, cpuOf pid: Int32, worker: Int32?, _ call: @escaping @Sendable () async throws -> Void) async throws -> EmbeddedHostFigures {
        let latency = try await latencies(calls, call)
        var throughput: [Int: Double] = [:]
        var cpu64 = 0.0
        var workerCPU64: Double?
        var programCPU1 = 0.0
        for inFlight in [1, 16, 64] {
            let count = calls * (inFlight == 1 ? 1 : 3)
            let cpuBefore = cpuSeconds(pid)
            let programBefore = cpuSeconds(getpid())
            let workerBefore = worker.flatMap { cpuSeconds($0) }
            let t0 = now()
            try await withThrowingTaskGroup(of: Void.self) { group in
                for lane in 0..<inFlight {
                    let share = count / inFlight + (lane < count % inFlight ? 1 : 0)
                    group.addTask {
                        for _ in 0..<share { try await call() }
                    }
                }
                try await group.waitForAll()
            }
            throughput[inFlight] = Double(count) / (Double(now() - t0) / 1e9)
            if inFlight == 1 { programCPU1 = perCall(getpid(), since: programBefore, calls: count) ?? 0 }
            if inFlight == 64 {
                cpu64 = perCall(pid, since: cpuBefore, calls: count) ?? cpu64
                workerCPU64 = perCall(worker, since: workerBefore, calls: count)
            }
        }
        let paced = 500
        let pacedBefore = cpuSeconds(getpid())
        for _ in 0..<paced {
            try await Task.sleep(for: .milliseconds(1))
            try await call()
        }
        let pacedCPU = perCall(getpid(), since: pacedBefore, calls: paced) ?? 0
        return EmbeddedHostFigures(latency: latency, throughput: throughput, hostCPUPerCall64: cpu64, workerCPUPerCall64: workerCPU64,
                                   programCPUPerCall1: programCPU1, programCPUPerPacedCall: pacedCPU)
    }
}
