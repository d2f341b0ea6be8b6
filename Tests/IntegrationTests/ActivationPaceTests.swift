import Foundation
import IPC
import PluginProtocol
import Protocol
import Testing

/// Activations are spawned a few a loop turn (`SpawnPace`), each turn after the loop has polled its
/// sockets (`AfterPoll`): what else comes to the supervisor is served between turns, however many
/// plugins come due at once. Seen in the supervisor's own answers: each `status` says how many
/// workers it had when it answered.
extension ActivationTests {
    /// Writes a first call to each of `targets` in one write on one connection; meanwhile asks
    /// `status` on another until each has a worker. Returns, for each answer, how many had one, and
    /// the burst's connection (its answers unread).
    static func statusDuringBurst(_ sv: RunningSupervisor, targets: [String]) throws -> (counts: [Int], burst: BlockingConnection) {
        let burst = try rawControl(sv.socket)
        let other = try rawControl(sv.socket)
        defer { other.close() }
        var frames: [UInt8] = []
        for (i, target) in targets.enumerated() {
            frames += callFrame(id: UInt64(i + 1), target: target, method: "echo", params: "[\(i)]", timeoutMs: 60_000)
        }
        let written = frames.withUnsafeBytes { write(burst.fd, $0.baseAddress, $0.count) }
        #expect(written == frames.count)
        struct Answer: Decodable { var result: [PluginStatus] }
        let wanted = Set(targets)
        var counts: [Int] = []
        let deadline = Date().addingTimeInterval(60)
        while counts.last != targets.count {
            guard Date() < deadline else { throw HarnessError("\(counts.last ?? 0) of \(targets.count) spawned in 60 s; log:\n\(sv.log)") }
            var status = FrameBuilder(kind: .status)
            status.uint("id", UInt64(counts.count + 1))
            try other.sendFrame(status.finish())
            let answer = try JSONDecoder().decode(Answer.self, from: Data(try #require(try other.receiveFrame())))
            counts.append(answer.result.filter { wanted.contains($0.identifier) && $0.pid != nil }.count)
        }
        return (counts, burst)
    }

    /// Whether `status` was answered between several turns: with two or more counts past the first
    /// turn's four (spawned in the read that brought the burst, which a `status` read in the same
    /// poll sees) and short of all 60. Spawned all in one go, or turn after turn without a poll
    /// between, the answers say 0, the first turn's few or 60, with now and then one poll NIO made
    /// among them.
    static func pacedBetweenTurns(_ counts: [Int]) -> Bool {
        Set(counts.filter { $0 > 4 && $0 < 60 }).count >= 2  // 4: `SpawnPace.perTurn`
    }

    /// Reads `count` answers from `connection`, each a result.
    static func readResults(_ connection: BlockingConnection, count: Int) throws {
        for _ in 0..<count {
            let answer = String(decoding: try #require(try connection.receiveFrame()), as: UTF8.self)
            #expect(answer.contains(#""result""#), "\(answer.prefix(300))")
        }
    }

    @Test("a burst of first calls to 60 inactive plugins does not hold the loop: status requests sent meanwhile are answered while some are spawned and others not yet, and every call is answered")
    func aBurstOfActivationsLeavesTheLoopFree() throws {
        let w = try TestWorld()
        let targets = (0..<60).map { "b.p\($0)" }
        for id in targets { try w.bundle(id, extra: ["activation": "onCall"]) }
        try w.bundle("b.hot")
        let sv = try RunningSupervisor(w)
        let (counts, burst) = try Self.statusDuringBurst(sv, targets: targets)
        defer { burst.close() }
        try Self.readResults(burst, count: 60)
        #expect(Self.pacedBetweenTurns(counts), "status answered only with \(Set(counts).sorted()) of 60 spawned")
    }

    @Test("60 onCall dependents of one onCall dependency, called at once: the dependency is activated for them, their workers are spawned a few a turn beside it, and their calls wait until it runs")
    func dependentsOfOneDependencyArePaced() throws {
        let w = try TestWorld()
        let hub = try w.bundle("d.hub", extra: ["activation": "onCall"])
        // Its start waits at a gate until the test opens it (TestKit's `startup-gate`).
        try "".write(toFile: hub + "/startup-gate", atomically: true, encoding: .utf8)
        let targets = (0..<60).map { "d.p\($0)" }
        for id in targets { try w.bundle(id, deps: [Dep("d.hub")], extra: ["activation": "onCall"]) }
        let sv = try RunningSupervisor(w)
        let (counts, burst) = try Self.statusDuringBurst(sv, targets: targets)
        defer { burst.close() }
        #expect(Self.pacedBetweenTurns(counts), "status answered only with \(Set(counts).sorted()) of 60 spawned")
        // Each worker loaded, waiting for `startup`: none runs, no call is answered, before d.hub runs.
        let list = try sv.status()
        #expect(list.filter { $0.identifier.hasPrefix("d.p") && $0.state == "starting" }.count == 60)
        #expect(list.first { $0.identifier == "d.hub" }?.state == "starting")
        try "".write(toFile: w.home + "/data/d.hub/go", atomically: true, encoding: .utf8)
        try Self.readResults(burst, count: 60)
        #expect(try sv.status().filter { $0.state == "running" }.count == 61)
    }
}
