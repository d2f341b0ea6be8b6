import Dispatch
import Foundation
import SupervisorClient
import Synchronization

/// Streams (SPEC §13) from a plugin to a program (`SupervisorClient`) through the supervisor:
/// throughput with 64 KiB elements, and every process's memory while a slow reader holds back a
/// fast producer (docs/benchmarks.md, "Method").
enum StreamBench {
    struct Figures {
        /// Payload MB/s (10^6 bytes of the elements' JSON strings a second), median of the rounds.
        var megabytesPerSecond: Double
        /// The same with elements of raw bytes (`StreamOutput<Bytes>`, `streamBytes`), median.
        var bytesMegabytesPerSecond: Double
        /// The supervisor's and the worker's CPU per MB of payload, in ms.
        var supervisorCPUPerMB: Double
        var workerCPUPerMB: Double
        /// Resident memory growth (KiB) over the slow reader's run: supervisor, worker, this process.
        var slowReader: (seconds: Double, megabytesRead: Double, supervisorKiB: Int, workerKiB: Int, readerKiB: Int)
    }

    static let chunk = 64 << 10

    static func run(socket: String, supervisorPID: Int32, workerPID: Int32, quick: Bool) throws -> Figures {
        try waitFor {
            let client = try await SupervisorClient.connect(socket: socket)
            defer { client.close() }
            return try await measure(client, supervisorPID, workerPID, quick)
        }
    }

    /// Reads `count` elements of `blob`; returns their payload bytes.
    static func read(_ client: SupervisorClient, count: Int, pace: Duration? = nil) async throws -> Int {
        var bytes = 0
        var taken = 0
        let started = ContinuousClock.now
        for try await element in client.streamJSON("bench.callee", "blob", params: Array(#"{"count":\#(count),"size":\#(chunk)}"#.utf8),
                                                   timeout: .seconds(600)) {
            bytes += element.count - 2  // the quotes
            taken += 1
            if let pace { try await Task.sleep(until: started + pace * taken) }
        }
        return bytes
    }

    /// Reads `count` elements of raw bytes (`blobBytesSame`); returns their payload bytes.
    static func readBytes(_ client: SupervisorClient, count: Int) async throws -> Int {
        var bytes = 0
        for try await element in client.streamBytes("bench.callee", "blobBytesSame", ["count": count, "size": chunk], timeout: .seconds(600)) {
            bytes += element.count
        }
        return bytes
    }

    private static func measure(_ client: SupervisorClient, _ supervisorPID: Int32, _ workerPID: Int32, _ quick: Bool) async throws -> Figures {
        _ = try await read(client, count: 200)
        let count = quick ? 1_000 : 4_096
        var rates: [Double] = []
        var supervisorCPU = 0.0, workerCPU = 0.0, payload = 0
        for _ in 0..<(quick ? 2 : 5) {
            let s0 = cpuSeconds(supervisorPID) ?? 0, w0 = cpuSeconds(workerPID) ?? 0
            let t0 = ContinuousClock.now
            let bytes = try await read(client, count: count)
            let elapsed = ContinuousClock.now - t0
            supervisorCPU += (cpuSeconds(supervisorPID) ?? 0) - s0
            workerCPU += (cpuSeconds(workerPID) ?? 0) - w0
            payload += bytes
            rates.append(Double(bytes) / 1e6 / (Double(elapsed.components.attoseconds) / 1e18 + Double(elapsed.components.seconds)))
        }
        rates.sort()
        let megabytes = Double(payload) / 1e6
        _ = try await readBytes(client, count: 200)
        var bytesRates: [Double] = []
        for _ in 0..<(quick ? 2 : 5) {
            let t0 = ContinuousClock.now
            let bytes = try await readBytes(client, count: count)
            let elapsed = ContinuousClock.now - t0
            bytesRates.append(Double(bytes) / 1e6 / (Double(elapsed.components.attoseconds) / 1e18 + Double(elapsed.components.seconds)))
        }
        bytesRates.sort()
        // A slow reader: 16 elements (1 MiB) a second of a producer that could send hundreds.
        let seconds = quick ? 5.0 : 30.0
        let before = (rss(supervisorPID), rss(workerPID), rss(getpid()))
        let bytes = try await read(client, count: Int(seconds * 16), pace: .milliseconds(1000 / 16))
        let after = (rss(supervisorPID), rss(workerPID), rss(getpid()))
        return Figures(megabytesPerSecond: rates[rates.count / 2], bytesMegabytesPerSecond: bytesRates[bytesRates.count / 2],
                       supervisorCPUPerMB: supervisorCPU * 1000 / megabytes, workerCPUPerMB: workerCPU * 1000 / megabytes,
                       slowReader: (seconds, Double(bytes) / 1e6, (after.0 - before.0) >> 10, (after.1 - before.1) >> 10, (after.2 - before.2) >> 10))
    }

    static func rss(_ pid: Int32) -> Int { memory(pid).rss }
}
