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

extension DependencyRecoveryTests {
    @Test("b eager, c onCall on b, d eager on b and c: b fails for good and takes c and d down; fixed and restarted, b runs, c becomes inactive, d starts again and its start activates c: all three run")
    func anOnCallMiddleDependencyLetsItsDependentsBack() throws {
        let w = try TestWorld()
        let b = try w.bundle("m.b")
        try "".write(toFile: b + "/fail-startup", atomically: true, encoding: .utf8)
        try w.bundle("m.c", deps: [Dep("m.b")], extra: ["activation": "onCall"])
        try w.bundle("m.d", deps: [Dep("m.b"), Dep("m.c")])
        let sv = try RunningSupervisor(w, args: ["--config", try w.config(#"{"restartLimit": 1}"#)])
        try sv.waitUntil("all three failed") { try ["m.b", "m.c", "m.d"].allSatisfy { try sv.plugin($0).state == "failed" } }
        try FileManager.default.removeItem(atPath: b + "/fail-startup")
        #expect(try sv.cli("restart", "m.b").code == 0)
        try sv.waitUntil("all three running") { try ["m.b", "m.c", "m.d"].allSatisfy { try sv.plugin($0).state == "running" } }
        #expect(sv.log.contains("activating m.c: dependent m.d"), "\(sv.log)")
    }
}

/// A running plugin whose bundle on disk can no longer start (docs/operations.md, SIGHUP): its
/// worker goes on, and `status` says why until a rescan finds the bundle fixed.
@Suite(.serialized, .timeLimit(.minutes(2)))
struct KeptBundleTests {
    @Test("a running plugin whose manifest now needs a plugin that is not installed: kept, its status says why, also after a crash's restart; a reload with nothing new says nothing again and counts nothing changed; its dependent, unchanged, is not counted either")
    func theReasonOutlivesACrashAndIsSaidOnce() throws {
        let w = try TestWorld()
        try w.bundle("k.a")
        try w.bundle("k.b", deps: [Dep("k.a")])
        let sv = try RunningSupervisor(w)
        try w.bundle("k.a", deps: [Dep("k.missing")])
        let first = try sv.cli("reload")
        #expect(first.code == 0 && first.out.contains(#""changed":1"#), "\(first.out) \(first.err)")
        let reason = "dependency k.missing is not installed"
        #expect(try sv.plugin("k.a").error?.contains(reason) == true)
        let pid = try #require(try sv.plugin("k.a").pid)
        kill(pid, SIGSEGV)
        try sv.waitUntil("k.a back") { let p = try sv.plugin("k.a"); return p.state == "running" && p.pid != pid }
        let restarted = try sv.plugin("k.a")
        #expect(restarted.error?.contains(reason) == true, "\(restarted)")
        let said = sv.log.components(separatedBy: "k.a changed on disk and cannot start").count
        let again = try sv.cli("reload")
        #expect(again.code == 0 && again.out.contains(#""changed":0"#), "\(again.out) \(again.err)")
        #expect(sv.log.components(separatedBy: "k.a changed on disk and cannot start").count == said)
        // Fixed: cleared.
        try w.bundle("k.a")
        #expect(try sv.cli("reload").code == 0)
        try sv.waitUntil("k.a without a reason") { try sv.plugin("k.a").error == nil }
    }
}
