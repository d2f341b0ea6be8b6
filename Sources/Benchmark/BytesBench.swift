import Foundation
import SupervisorClient

/// Raw bytes (SPEC §13) from a plugin to a program (`SupervisorClient.callBytes`): a 1 MiB result's
/// latency, and a 256 MiB result's time and every process's memory against one memcpy of 256 MiB
/// (docs/benchmarks.md, "Method").
enum BytesBench {
    struct Figures {
        var oneMiB: Samples
        /// 256 MiB: the call's time (ns), memcpy's (ns), the peak RSS growth (KiB) of the supervisor
        /// and the worker, and this process's RSS growth with the result mapped and read.
        var big: (ns: Double, memcpyNs: Double, supervisorKiB: Int, workerKiB: Int, readerKiB: Int)
    }

    static func run(socket: String, supervisorPID: Int32, workerPID: Int32, quick: Bool) throws -> Figures {
        try waitFor {
            let client = try await SupervisorClient.connect(socket: socket)
            defer { client.close() }
            return try await measure(client, supervisorPID, workerPID, quick)
        }
    }

    struct Size: Encodable, Sendable { var size: Int; var fill: Bool }

    private static func measure(_ client: SupervisorClient, _ supervisorPID: Int32, _ workerPID: Int32, _ quick: Bool) async throws -> Figures {
        for _ in 0..<20 { try await client.callBytes("bench.callee", "bytes", Size(size: 1 << 20, fill: true)).close() }
        var oneMiB = Samples()
        for _ in 0..<(quick ? 50 : 300) {
            let t0 = now()
            let bytes = try await client.callBytes("bench.callee", "bytes", Size(size: 1 << 20, fill: true))
            oneMiB.add(now() - t0)
            bytes.close()
        }
        // 256 MiB, once, against one memcpy of as much (both source and target touched first).
        let size = 256 << 20
        let source = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 64)
        let target = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 64)
        memset(source, 7, size)
        memset(target, 0, size)
        let m0 = now()
        memcpy(target, source, size)
        let memcpyNs = Double(now() - m0)
        source.deallocate()
        target.deallocate()
        let before = (hwm(supervisorPID), hwm(workerPID), memory(getpid()).rss)
        let t0 = now()
        let big = try await client.callBytes("bench.callee", "bytes", Size(size: size, fill: true), timeout: .seconds(120))
        let ns = Double(now() - t0)
        // Read through once (mapped), as a program would.
        let bytes = try big.copy()
        let readerGrowth = memory(getpid()).rss - before.2
        precondition(bytes.count == size)
        big.close()
        return Figures(oneMiB: oneMiB, big: (ns, memcpyNs, (hwm(supervisorPID) - before.0) >> 10, (hwm(workerPID) - before.1) >> 10, readerGrowth >> 10))
    }

    /// The peak resident size of `pid` (VmHWM), in bytes.
    static func hwm(_ pid: Int32) -> Int {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }) else { return 0 }
        return (Int(line.split(separator: " ").dropFirst().first ?? "0") ?? 0) * 1024
    }
}
