import Dispatch
import Foundation
import SupervisorClient
import Synchronization

/// `SupervisorClient`'s calls (SPEC §12, docs/host.md) to a running `supervisor start`: a program's
/// tasks on one client, over its direct link to the worker after the first call (one hop); the
/// supervisor's CPU per call shows it is out of the path.
enum ClientBench {
    static func run(socket: String, calls: Int, supervisorPID: Int32) throws -> EmbeddedHostFigures {
        try waitFor {
            let client = try await SupervisorClient.connect(socket: socket, linkPollMicroseconds: linkPollMicroseconds ?? SupervisorClient.defaultLinkPollMicroseconds)
            defer { client.close() }
            return try await measure(client, calls: calls, supervisorPID: supervisorPID)
        }
    }

    /// A client without direct links (`directLinks: false`): its calls' latency through the
    /// supervisor, the path a program's calls take before (or without) a link.
    static func throughSupervisor(socket: String, calls: Int) throws -> Samples {
        try waitFor {
            let client = try await SupervisorClient.connect(socket: socket, directLinks: false)
            defer { client.close() }
            return try await EmbeddedHostBench.latencies(calls) { _ = try await client.callJSON("bench.callee", "ping", params: nil) }
        }
    }

    private static func measure(_ client: SupervisorClient, calls: Int, supervisorPID: Int32) async throws -> EmbeddedHostFigures {
        _ = try await client.callJSON("bench.callee", "ping", params: nil)
        // The first call went through the supervisor and asked for the link.
        let deadline = ContinuousClock.now + .seconds(5)
        while client.linkedPlugins.isEmpty, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
        if client.linkedPlugins.isEmpty { note("client: no direct link to bench.callee; its calls go through the supervisor") }
        let worker = try await client.status().first { $0.identifier == "bench.callee" }?.pid
        return try await EmbeddedHostBench.measureCalls(calls, cpuOf: supervisorPID, worker: worker) {
            _ = try await client.callJSON("bench.callee", "ping", params: nil)
        }
    }
}
