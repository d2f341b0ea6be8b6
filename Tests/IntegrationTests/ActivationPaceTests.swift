import Foundation
import IPC
import PluginProtocol
import Protocol
import Testing

/// Activations are spawned a few a loop turn (`SpawnPace`): what else comes to the supervisor is
/// served between turns, however many plugins come due at once.
extension ActivationTests {
    @Test("a burst of first calls to 60 inactive plugins does not hold the loop: a status request sent after it is answered before the burst's plugins have all been spawned")
    func aBurstOfActivationsLeavesTheLoopFree() throws {
        // An order in time between the loop's turns: an instrumented supervisor's turns and its
        // status answer are too slow to say it (the rule is the core's, SpawnPaceTests).
        guard !Build.threadSanitized else { return }
        let w = try TestWorld()
        for i in 0..<60 { try w.bundle("b.p\(i)", extra: ["activation": "onCall"]) }
        try w.bundle("b.hot")
        let sv = try RunningSupervisor(w)
        // Each activation is announced as its worker is spawned, with the supervisor's time.
        let file = w.root + "/events.json"
        let follower = try ClientTests.follow(sv, ["--json"], to: file)
        defer { follower.terminate() }
        try sv.waitUntil("the follower to listen") { try sv.cli("metrics").out.contains("supervisor_host_event_listeners 1") }
        let burst = try rawControl(sv.socket)
        let other = try rawControl(sv.socket)
        defer { burst.close(); other.close() }
        // All 60 first calls in one write: read in one go, each an activation.
        var frames: [UInt8] = []
        for i in 0..<60 { frames += callFrame(id: UInt64(i + 1), target: "b.p\(i)", method: "echo", params: "[\(i)]", timeoutMs: 60_000) }
        _ = frames.withUnsafeBytes { write(burst.fd, $0.baseAddress, $0.count) }
        // `status`: the supervisor's own answer, whatever the CPU the new workers take from b.hot's.
        var status = FrameBuilder(kind: .status)
        status.uint("id", 1)
        try other.sendFrame(status.finish())
        let hotAnswer = String(decoding: try #require(try other.receiveFrame()), as: UTF8.self)
        let answeredAt = Self.logTime(Date())
        #expect(hotAnswer.contains(#""result""#) && hotAnswer.contains("b.hot"), "\(hotAnswer.prefix(300))")
        for _ in 0..<60 {
            let answer = String(decoding: try #require(try burst.receiveFrame()), as: UTF8.self)
            #expect(answer.contains(#""result""#), "\(answer)")
        }
        let activated = try sv.waitFor("60 activations heard") { () -> [HostEvent]? in
            let lines = ((try? String(contentsOfFile: file, encoding: .utf8)) ?? "").split(separator: "\n")
            let events = lines.compactMap { try? JSONDecoder().decode(HostEvent.self, from: Data($0.utf8)) }.filter { $0.event == .activated }
            return events.count == 60 ? events : nil
        }
        // Spawned a few a turn (SpawnPace), the loop served the other call between turns; spawned
        // all in the read that brought them, the call would be read after the last was spawned.
        let last = activated.map(\.time).max() ?? ""
        #expect(answeredAt < last, "status was answered at \(answeredAt), after the last activation at \(last)")
    }

    @Test("60 onCall dependents of one onCall dependency, called at once, wait for it; when it runs they are spawned a few a turn: a status request is answered while some of them are spawned and others not yet")
    func dependentsOfOneDependencyArePaced() throws {
        guard !Build.threadSanitized else { return }
        let w = try TestWorld()
        let hub = try w.bundle("d.hub", extra: ["activation": "onCall"])
        // Its start waits at a gate until the test opens it (TestKit's `startup-gate`).
        try "".write(toFile: hub + "/startup-gate", atomically: true, encoding: .utf8)
        for i in 0..<60 { try w.bundle("d.p\(i)", deps: [Dep("d.hub")], extra: ["activation": "onCall"]) }
        let sv = try RunningSupervisor(w)
        let burst = try rawControl(sv.socket)
        let other = try rawControl(sv.socket)
        defer { burst.close(); other.close() }
        var frames: [UInt8] = []
        for i in 0..<60 { frames += callFrame(id: UInt64(i + 1), target: "d.p\(i)", method: "echo", params: "[\(i)]", timeoutMs: 60_000) }
        _ = frames.withUnsafeBytes { write(burst.fd, $0.baseAddress, $0.count) }
        try sv.waitUntil("all 60 wait for d.hub") { try sv.status().filter { $0.identifier.hasPrefix("d.p") && $0.state == "starting" }.count == 60 }
        // Let d.hub run: its 60 dependents come due in one pass. Status asked again and again
        // meanwhile: each answer says how many had a worker when the supervisor answered (its
        // own moment, whatever CPU this test gets).
        try "".write(toFile: w.home + "/data/d.hub/go", atomically: true, encoding: .utf8)
        struct Answer: Decodable { var result: [PluginStatus] }
        var counts: [Int] = []
        var id: UInt64 = 0
        let deadline = Date().addingTimeInterval(30)
        while counts.last != 60 {
            guard Date() < deadline else { throw HarnessError("\(counts.last ?? 0) of 60 dependents spawned in 30 s; log:\n\(sv.log)") }
            id += 1
            var status = FrameBuilder(kind: .status)
            status.uint("id", id)
            try other.sendFrame(status.finish())
            let answer = try JSONDecoder().decode(Answer.self, from: Data(try #require(try other.receiveFrame())))
            counts.append(answer.result.filter { $0.identifier.hasPrefix("d.p") && $0.pid != nil }.count)
        }
        for _ in 0..<60 {
            let answer = String(decoding: try #require(try burst.receiveFrame()), as: UTF8.self)
            #expect(answer.contains(#""result""#), "\(answer)")
        }
        // Spawned all in the pass that found d.hub running, every status would be answered before
        // the first spawn or after the last (here, none was between); paced, one or more are.
        #expect(counts.contains { $0 > 0 && $0 < 60 }, "status answered only with \(Set(counts).sorted()) of 60 spawned")
    }

    /// `time` as the supervisor writes it in events and JSON logs (`JSONLogHandler.now`).
    static func logTime(_ date: Date) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'"
        return formatter.string(from: date)
    }
}
