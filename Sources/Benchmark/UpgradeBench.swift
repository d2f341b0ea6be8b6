#if canImport(Glibc)
import Glibc
#endif
import Foundation
import IPC
import PluginProtocol
import Synchronization

/// The supervisor upgraded in place (docs/operations.md, "Upgrading the supervisor") while four
/// clients call through it in a loop: the pause the new binary reports, and the longest gap
/// between two answered calls of one client (what a caller sees).
enum UpgradeBench {
    static func run(_ rig: Rig, _ report: Report, quick: Bool) throws {
        note("upgrade in place")
        let upgradePlugins = try rig.plugins("upgrade", count: 4)
        try rig.start(plugins: upgradePlugins)
        final class Lane: Sendable {
            let longestGap = Atomic<UInt64>(0)
            let answered = Atomic<Int>(0)
            let failed = Atomic<Int>(0)
            let stop = Atomic<Bool>(false)
            let done = DispatchSemaphore(value: 0)
        }
        let lanes = (0..<4).map { _ in Lane() }
        for (i, lane) in lanes.enumerated() {
            let c = try rig.connect()
            Thread {
                var last = now()
                var n: UInt64 = 0
                while !lane.stop.load(ordering: .relaxed) {
                    n += 1
                    do {
                        try c.sendFrame(callFrame(id: n, target: "bench.p\(i)", method: "ping"))
                        let reply = try c.receiveFrame() ?? []
                        if String(decoding: reply, as: UTF8.self).contains("\"result\"") { lane.answered.add(1, ordering: .relaxed) } else { lane.failed.add(1, ordering: .relaxed) }
                    } catch {
                        lane.failed.add(1, ordering: .relaxed)
                        break
                    }
                    let t = now()
                    lane.longestGap.max(t - last, ordering: .relaxed)
                    last = t
                }
                c.close()
                lane.done.signal()
            }.start()
        }
        usleep(300_000)
        note("upgrade: \(lanes.map { $0.answered.load(ordering: .relaxed) }) calls answered in the first 300 ms")
        var pauses = Samples()
        let rounds = quick ? 3 : 10
        for _ in 0..<rounds {
            let answer = try rig.request(.upgrade)
            struct Answer: Decodable { struct Upgraded: Decodable { var pauseMs: Double }; var upgraded: Upgraded }
            pauses.add(UInt64(try JSONDecoder().decode(Answer.self, from: Data(answer)).upgraded.pauseMs * 1_000_000))
            usleep(200_000)
        }
        for lane in lanes { lane.stop.store(true, ordering: .relaxed) }
        for lane in lanes { lane.done.wait() }
        report.add("upgrade in place (4 workers), pause the new binary reports, median of \(rounds)", pauses.median / 1000, "ms", target: "< 50 ms")
        report.add("upgrade in place, pause, worst", Double(pauses.values.max() ?? 0) / 1_000_000, "ms")
        report.add("upgrade in place, longest gap between answered calls of one client (4 clients through the supervisor)", Double(lanes.map { $0.longestGap.load(ordering: .relaxed) }.max() ?? 0) / 1_000_000, "ms", target: "< 50 ms")
        report.add("upgrade in place, calls answered (4 clients)", Double(lanes.map { $0.answered.load(ordering: .relaxed) }.reduce(0, +)), "calls")
        report.add("upgrade in place, calls failed", Double(lanes.map { $0.failed.load(ordering: .relaxed) }.reduce(0, +)), "calls")
        rig.stop()
    }
}
