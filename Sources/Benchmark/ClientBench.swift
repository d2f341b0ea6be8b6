import Dispatch
import Foundation
import SupervisorClient
import Synchronization

/// `SupervisorClient`'s calls (SPEC §12, docs/host.md) to a running `supervisor start`: a program's
/// tasks on one client, over its direct link to the worker after the first call (one hop); the
/// supervisor's CPU per call shows it is out of the path.
enum ClientBench {
    static func run(socket: String, calls: Int, supervisorPID: Int32) throws -> EmbeddedHostFigures {
        let outcome = Mutex<Result<EmbeddedHostFigures, any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        Task {
            do {
                let client = try await SupervisorClient.connect(socket: socket)
                defer { client.close() }
                let figures = try await measure(client, calls: calls, supervisorPID: supervisorPID)
                outcome.withLock { $0 = .success(figures) }
            } catch {
                outcome.withLock { $0 = .failure(error) }
            }
            done.signal()
        }
        done.wait()
        return try outcome.withLock { $0 }!.get()
    }

    private static func measure(_ client: SupervisorClient, calls: Int, supervisorPID: Int32) async throws -> EmbeddedHostFigures {
        _ = try await client.callJSON("bench.callee", "ping", params: nil)
        // The first call went through the supervisor and asked for the link.
        let deadline = ContinuousClock.now + .seconds(5)
        while client.linkedPlugins.isEmpty, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
        if client.linkedPlugins.isEmpty { note("client: no direct link to bench.callee; its calls go through the supervisor") }
        for _ in 0..<500 { _ = try await client.callJSON("bench.callee", "ping", params: nil) }
        var latency = Samples()
        latency.values.reserveCapacity(calls)
        for _ in 0..<calls {
            let t0 = now()
            _ = try await client.callJSON("bench.callee", "ping", params: nil)
            latency.add(now() - t0)
        }
        var throughput: [Int: Double] = [:]
        var supervisorCPU64 = 0.0
        for inFlight in [1, 16, 64] {
            let count = calls * (inFlight == 1 ? 1 : 3)
            let cpuBefore = cpuSeconds(supervisorPID)
            let t0 = now()
            try await withThrowingTaskGroup(of: Void.self) { group in
                for lane in 0..<inFlight {
                    let share = count / inFlight + (lane < count % inFlight ? 1 : 0)
                    group.addTask {
                        for _ in 0..<share { _ = try await client.callJSON("bench.callee", "ping", params: nil) }
                    }
                }
                try await group.waitForAll()
            }
            throughput[inFlight] = Double(count) / (Double(now() - t0) / 1e9)
            if inFlight == 64, let before = cpuBefore, let after = cpuSeconds(supervisorPID) {
                supervisorCPU64 = (after - before) / Double(count) * 1e6
            }
        }
        return EmbeddedHostFigures(latency: latency, throughput: throughput, hostCPUPerCall64: supervisorCPU64)
    }
}
