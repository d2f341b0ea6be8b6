import Foundation
import PluginProtocol
import Protocol
import Testing

/// Dependents failed by their dependencies, as those come back (docs/operations.md "States").
@Suite(.serialized, .timeLimit(.minutes(2)))
struct DependencyRecoveryTests {
    @Test("d depends on a and on c, which depends on b, which depends on a; a fails to start for good and takes them all down; fixed and restarted, a runs, then b, c and d: d is told failed once, not again when a came back while c was still down")
    func aDependentFailedByTwoIsToldOnce() throws {
        let w = try TestWorld()
        let a = try w.bundle("r.a")
        try "".write(toFile: a + "/fail-startup", atomically: true, encoding: .utf8)
        try w.bundle("r.b", deps: [Dep("r.a")])
        try w.bundle("r.c", deps: [Dep("r.b")])
        try w.bundle("r.d", deps: [Dep("r.c"), Dep("r.a")])
        let sv = try RunningSupervisor(w, args: ["--config", try w.config(#"{"restartLimit": 1}"#)])
        let file = w.root + "/events.json"
        let follower = try ClientTests.follow(sv, ["--json"], to: file)
        defer { follower.terminate() }
        try sv.waitUntil("the follower to listen") { try sv.cli("metrics").out.contains("supervisor_host_event_listeners 1") }
        try sv.waitUntil("all four failed") { try ["r.a", "r.b", "r.c", "r.d"].allSatisfy { try sv.plugin($0).state == "failed" } }
        try FileManager.default.removeItem(atPath: a + "/fail-startup")
        #expect(try sv.cli("restart", "r.a").code == 0)
        try sv.waitUntil("all four running") { try ["r.a", "r.b", "r.c", "r.d"].allSatisfy { try sv.plugin($0).state == "running" } }
        let told = try sv.waitFor("r.d started") { () -> [HostEvent]? in
            let lines = ((try? String(contentsOfFile: file, encoding: .utf8)) ?? "").split(separator: "\n")
            let events = lines.compactMap { try? JSONDecoder().decode(HostEvent.self, from: Data($0.utf8)) }.filter { $0.plugin == "r.d" }
            return events.last?.event == .started ? events : nil
        }
        // Its failure was told before the follower listened, or once after: never twice.
        #expect(told.filter { $0.event == .failed }.count <= 1 && told.map(\.event).last == .started, "\(told.map(\.event))")
        #expect(sv.log.components(separatedBy: "r.d will not start").count - 1 == 1, "\(sv.log)")
    }
}
