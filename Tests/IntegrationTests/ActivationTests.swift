import Foundation
import IPC
import PluginProtocol
import Protocol
import Testing

/// SPEC §16 with real workers: `onCall` plugins have no worker until something needs them, and
/// plugins idle for their `idleStopMs` are stopped cleanly and come back on their next call.
@Suite(.serialized, .timeLimit(.minutes(3)))
struct ActivationTests {
    static func config(_ w: TestWorld, _ json: String) throws -> String {
        let path = w.root + "/config-\(UUID().uuidString.prefix(6)).json"
        try json.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    @Test("an onCall plugin has no worker until its first call: ready says it is inactive, the call starts it and is answered, and it runs on")
    func onCallStartsOnTheFirstCall() throws {
        let w = try TestWorld()
        try w.bundle("a.lazy", extra: ["activation": "onCall"])
        try w.bundle("a.eager")
        let sv = try RunningSupervisor(w)
        #expect(sv.stdout.contains("1 plugin running, 1 inactive until called"), "\(sv.stdout)")
        let idle = try sv.plugin("a.lazy")
        #expect(idle.state == "inactive" && idle.pid == nil, "\(idle)")
        #expect(workerChildren(of: sv.pid).count == 1, "a worker for the inactive plugin")
        #expect(try sv.call("a.lazy", "echo", "[7]", as: [Int].self) == [7])
        let running = try sv.plugin("a.lazy")
        #expect(running.state == "running" && running.pid != nil && running.restarts == 0, "\(running)")
        #expect(sv.log.contains("activating a.lazy: call"))
    }

    @Test("an eager plugin that depends on an onCall one activates it at start; both run")
    func aDependentActivatesItsDependency() throws {
        let w = try TestWorld()
        try w.bundle("a.base", extra: ["activation": "onCall"])
        try w.bundle("a.user", deps: [Dep("a.base")])
        let sv = try RunningSupervisor(w)
        try sv.waitUntil("both running") { try sv.status().allSatisfy { $0.state == "running" } }
        #expect(sv.log.contains("activating a.base: dependent a.user"))
    }

    @Test("a plugin idle for its idleStopMs is stopped cleanly (willTerminate), shown inactive, not counted as a restart; its next call starts it again")
    func idleStopAndBack() throws {
        let w = try TestWorld()
        try w.bundle("a.nap", extra: ["idleStopMs": 300])
        let cfg = try Self.config(w, #"{"idleCheckIntervalMs": 100}"#)
        let sv = try RunningSupervisor(w, args: ["--config", cfg])
        let first = try #require(try sv.plugin("a.nap").pid)
        #expect(try sv.call("a.nap", "echo", "[1]", as: [Int].self) == [1])
        try sv.waitUntil(timeout: 10, "a.nap inactive") { try sv.plugin("a.nap").state == "inactive" }
        #expect(kill(first, 0) != 0, "its worker is gone")
        #expect(sv.log.contains("stopped after") && sv.log.contains("without traffic"))
        let terminated = try String(contentsOfFile: w.home + "/data/a.nap/terminated", encoding: .utf8)
        #expect(!terminated.isEmpty, "willTerminate was not delivered")
        #expect(try sv.call("a.nap", "echo", "[2]", as: [Int].self) == [2])
        let back = try sv.plugin("a.nap")
        #expect(back.state == "running" && back.pid != first && back.restarts == 0, "\(back)")
    }

    @Test("a slow call keeps a plugin from its idle stop: only a plugin with nothing inside is idle")
    func aLongCallIsNotIdleness() throws {
        let w = try TestWorld()
        try w.bundle("a.busy", extra: ["idleStopMs": 200])
        let cfg = try Self.config(w, #"{"idleCheckIntervalMs": 50}"#)
        let sv = try RunningSupervisor(w, args: ["--config", cfg])
        let pid = try #require(try sv.plugin("a.busy").pid)
        #expect(try sv.call("a.busy", "sleep", #"{"ms":1200}"#, as: Int.self) == 1200)
        #expect(try sv.plugin("a.busy").pid == pid, "stopped while a call was inside")
    }

    @Test("an onCall plugin that cannot start: its caller hears why, and the supervisor serves the others")
    func anActivationThatFails() throws {
        let w = try TestWorld()
        let bundle = try w.bundle("a.broken", extra: ["activation": "onCall", "restart": "never"])
        try "".write(toFile: bundle + "/crash-in-startup", atomically: true, encoding: .utf8)
        try w.bundle("a.fine")
        let sv = try RunningSupervisor(w)
        let r = try sv.cli("call", "a.broken", "echo", "[1]")
        #expect(r.code != 0 && r.err.contains("unavailable"), "\(r.err)")
        #expect(try sv.plugin("a.broken").state == "failed")
        #expect(try sv.call("a.fine", "echo", "[3]", as: [Int].self) == [3])
    }
}
