import Foundation
import PluginProtocol
import Protocol
import Testing

@Suite(.serialized, .timeLimit(.minutes(3)))
struct DependencyTests {
    @Test("a diamond starts in dependency order, launches after all started, and stops in reverse")
    func diamondOrder() throws {
        let w = try TestWorld()
        try w.bundle("t.a")
        try w.bundle("t.b", deps: [Dep("t.a")])
        try w.bundle("t.c", deps: [Dep("t.a", ">=1.0.0 <2.0.0")])
        try w.bundle("t.d", deps: [Dep("t.b"), Dep("t.c")])
        try w.bundle("t.solo")
        let sv = try RunningSupervisor(w)
        #expect(sv.stdout.contains("ready: 5 plugins running"))

        var startup: [String: UInt64] = [:]
        var launch: [String: UInt64] = [:]
        for id in ["t.a", "t.b", "t.c", "t.d", "t.solo"] {
            let info = try sv.info(id)
            #expect(info.identifier == id)
            let started: UInt64 = try #require(info.time(of: "startup"))
            let launched: UInt64 = try #require(info.time(of: "launch"))
            (startup[id], launch[id]) = (started, launched)
            #expect(info.names.filter { $0 == "startup" }.count == 1)
        }
        #expect(startup["t.a"]! < startup["t.b"]!)
        #expect(startup["t.a"]! < startup["t.c"]!)
        #expect(startup["t.b"]! < startup["t.d"]!)
        #expect(startup["t.c"]! < startup["t.d"]!)
        // launch only once every plugin has started
        #expect(launch.values.min()! > startup.values.max()!)

        #expect(try sv.cli("stop").code == 0)
        #expect(try sv.waitForExit() == 0)
        #expect(try terminated("t.d", w) < terminated("t.b", w))
        #expect(try terminated("t.d", w) < terminated("t.c", w))
        #expect(try terminated("t.b", w) < terminated("t.a", w))
        #expect(try terminated("t.c", w) < terminated("t.a", w))
    }

    /// When the plugin `id` heard `willTerminate` (TestKit writes the time to its data folder).
    func terminated(_ id: String, _ w: TestWorld) throws -> UInt64 {
        let text = try String(contentsOfFile: w.home + "/data/\(id)/terminated", encoding: .utf8)
        return try #require(UInt64(text.split(separator: "\n").first ?? ""))
    }

    @Test("at shutdown a plugin stops as soon as its dependents have, not when an unrelated slow stop (a call draining) has ended")
    func aSlowStopHoldsBackOnlyWhatItNeeds() async throws {
        let w = try TestWorld()
        try w.bundle("t.a")
        try w.bundle("t.b", deps: [Dep("t.a")])
        try w.bundle("t.slow")
        let sv = try RunningSupervisor(w)
        let call = Task.detached { try sv.cli("call", "t.slow", "block", #"{"ms":2000}"#) }
        try sv.waitUntil("the slow call to start") { FileManager.default.fileExists(atPath: w.home + "/data/t.slow/blocking") }
        #expect(try sv.cli("stop").code == 0)
        #expect(try sv.waitForExit() == 0)
        #expect(try await call.value.code == 0, "the call in flight is answered")
        #expect(try terminated("t.b", w) < terminated("t.a", w))
        #expect(try terminated("t.a", w) < terminated("t.slow", w), "t.a waited for t.slow's drain")
    }

    @Test("plugins a reload removes stop as at shutdown: each as soon as its removed dependents have, not after an unrelated slow stop")
    func aRemovalHoldsBackOnlyWhatItNeeds() async throws {
        let w = try TestWorld()
        let a = try w.bundle("r.a")
        let b = try w.bundle("r.b", deps: [Dep("r.a")])
        let slow = try w.bundle("r.slow")
        try w.bundle("r.stays")
        let sv = try RunningSupervisor(w)
        let call = Task.detached { try sv.cli("call", "r.slow", "block", #"{"ms":2000}"#) }
        try sv.waitUntil("the slow call to start") { FileManager.default.fileExists(atPath: w.home + "/data/r.slow/blocking") }
        for bundle in [a, b, slow] { try FileManager.default.removeItem(atPath: bundle) }
        let reload = try sv.cli("reload")
        #expect(reload.code == 0 && reload.out.contains(#""removed":3"#), "\(reload.out) \(reload.err)")
        #expect(try await call.value.code == 0, "the call in flight is answered")
        #expect(try terminated("r.b", w) < terminated("r.a", w))
        #expect(try terminated("r.a", w) < terminated("r.slow", w), "r.a waited for r.slow's drain")
        #expect(try sv.status().map(\.identifier) == ["r.stays"])
    }

    @Test("a dependency a reload removes while its dependent stays: the log says what the dependent gets, and it gets that (notFound)")
    func aRemovedDependencyIsNotFound() throws {
        let w = try TestWorld()
        let a = try w.bundle("g.a")
        try w.bundle("g.b", deps: [Dep("g.a")])
        let sv = try RunningSupervisor(w)
        #expect(try sv.call("g.b", "pingVia", #""g.a""#, as: Int.self) == 1)
        try FileManager.default.removeItem(atPath: a)
        let reload = try sv.cli("reload")
        #expect(reload.code == 0 && reload.out.contains(#""removed":1"#), "\(reload.out) \(reload.err)")
        #expect(sv.log.contains("g.a was removed; g.b still depends on it and will get notFound from it"), "\(sv.log)")
        let call = try sv.cli("call", "g.b", "pingVia", #""g.a""#)
        #expect(call.code != 0 && call.err.contains("notFound") && call.err.contains("g.a"), "\(call.out) \(call.err)")
        #expect(try sv.plugin("g.b").state == "running")
    }

    @Test("a dependency that fails before its dependents' workers said hello: they fail by it, and the ready line comes")
    func dependencyFailsBeforeHello() throws {
        let w = try TestWorld()
        // Not a library: its worker ends at its dlopen (loadError, no restart), at once.
        let broken = try w.rawBundle("f.broken", manifest: #"{"identifier":"f.broken","version":"1.0.0","library":"libbroken.so"}"#)
        try "not a library".write(toFile: broken + "/libbroken.so", atomically: true, encoding: .utf8)
        // The C example, loaded 300 ms late: its hello comes well after the dependency failed.
        let example = try String(contentsOfFile: URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("examples/CHello/chello.c").path, encoding: .utf8)
        let slow = try Build.cLibrary("slowhello", source: example + """

            #include <time.h>
            __attribute__((constructor)) static void slow_load(void) { struct timespec t = {0, 300000000}; nanosleep(&t, 0); }
            """)
        try w.bundle("f.after", deps: [Dep("f.broken")], library: slow)
        try w.bundle("f.last", deps: [Dep("f.after")], library: slow)
        try w.bundle("f.fine", library: slow)
        let sv = try RunningSupervisor(w)
        #expect(sv.stdout.contains("1 plugins running, 3 failed") || sv.stdout.contains("1 plugin running, 3 failed"), "\(sv.stdout)")
        let status = try sv.status()
        #expect(status.first { $0.identifier == "f.broken" }?.lastExit?.reason == .loadError)
        for id in ["f.after", "f.last"] {
            let p = try #require(status.first { $0.identifier == id })
            #expect(p.state == "failed" && p.pid == nil, "\(id): \(p.state), pid \(p.pid.map(String.init) ?? "none")")
            #expect((p.error ?? "").contains("f."), "\(id): \(p.error ?? "no error")")
        }
        #expect(status.first { $0.identifier == "f.fine" }?.state == "running")
        #expect(try sv.cli("stop").code == 0)
        #expect(try sv.waitForExit() == 0)
    }

    @Test("a dependency removed, or made unstartable, by a rescan while its dependent waits for it: the dependent fails by it, and the ready line comes",
          arguments: ["removed", "unstartable"])
    func dependencyGoneWhileItsDependentWaits(_ change: String) throws {
        let w = try TestWorld()
        let dependency = try w.bundle("g.dep")
        try "3000".write(toFile: dependency + "/startup-delay-ms", atomically: true, encoding: .utf8)
        try w.bundle("g.user", deps: [Dep("g.dep")])
        try w.bundle("g.fine")
        let sv = try RunningSupervisor(w, waitForReady: false)
        try sv.waitUntil("g.user loaded, waiting for g.dep") {
            guard let p = try? sv.plugin("g.user") else { return false }
            return p.state == "starting" && !p.sandbox.isEmpty
        }
        if change == "removed" {
            try FileManager.default.removeItem(atPath: dependency)
        } else {
            try #"{"identifier":"g.dep","version":"1.0.0","library":"libTestKit.so","dependencies":["no.such"]}"#
                .write(toFile: dependency + "/plugin.json", atomically: true, encoding: .utf8)
        }
        sv.signal(SIGHUP)
        try sv.waitForReady(timeout: 10)
        let user = try sv.plugin("g.user")
        #expect(user.state == "failed" && user.pid == nil, "\(user.state)")
        #expect(user.error == (change == "removed" ? "dependency g.dep is not installed" : "dependency g.dep is failed"), "\(user.error ?? "no error")")
        #expect(try sv.plugin("g.fine").state == "running")
        #expect(try sv.cli("stop").code == 0)
        #expect(try sv.waitForExit() == 0)
    }

    @Test("a cycle is reported whole, a missing dependency and an unmet range name the file; the rest start")
    func cyclesAndMissing() throws {
        let w = try TestWorld()
        try w.bundle("c.a", deps: [Dep("c.b")])
        try w.bundle("c.b", deps: [Dep("c.c")])
        try w.bundle("c.c", deps: [Dep("c.a")])
        try w.bundle("c.after", deps: [Dep("c.a")])
        try w.bundle("m.needy", deps: [Dep("m.absent")])
        try w.bundle("v.old", version: "1.4.0")
        try w.bundle("v.picky", deps: [Dep("v.old", ">=2.0.0")])
        try w.bundle("ok.fine")
        let sv = try RunningSupervisor(w)
        let status = try sv.status()
        func entry(_ id: String) throws -> PluginStatus { try #require(status.first { $0.identifier == id }) }

        for id in ["c.a", "c.b", "c.c"] {
            let e = try entry(id)
            #expect(e.state == "failed")
            #expect(e.error?.contains("dependency cycle c.a → c.b → c.c → c.a") == true, "\(e.error ?? "")")
            #expect(e.error?.contains("\(id.replacingOccurrences(of: "c.", with: "c."))/plugin.json") == true)
        }
        #expect(try entry("c.after").state == "failed")
        #expect(try entry("c.after").error?.contains("dependency c.a cannot start") == true)
        let needy = try entry("m.needy")
        #expect(needy.state == "failed")
        #expect(needy.error?.contains("m.needy/plugin.json") == true)
        #expect(needy.error?.contains("m.absent is not installed") == true)
        let picky = try entry("v.picky")
        #expect(picky.error?.contains(">=2.0.0 is not met by the installed 1.4.0") == true, "\(picky.error ?? "")")
        #expect(try entry("v.old").state == "running")
        #expect(try entry("ok.fine").state == "running")
        #expect(sv.log.contains("c.a → c.b → c.c → c.a"))
        #expect(try sv.call("ok.fine", "echo", "[1]", as: [Int].self) == [1])
    }

    @Test("invalid manifests and duplicate identifiers are errors naming the file and field")
    func invalidManifests() throws {
        let w = try TestWorld()
        let noVersion = try w.rawBundle("noversion", manifest: #"{"identifier": "bad.noversion", "library": "x.so"}"#)
        let badID = try w.rawBundle("badid", manifest: #"{"identifier": "bad id!", "version": "1.0.0", "library": "x.so"}"#)
        let garbage = try w.rawBundle("garbage", manifest: #"{"identifier": "#)
        let badVersion = try w.rawBundle("badversion", manifest: #"{"identifier": "bad.version", "version": "1.0", "library": "x.so"}"#)
        let badPerm = try w.rawBundle("badperm", manifest: #"{"identifier": "bad.perm", "version": "1.0.0", "library": "x.so", "permissions": ["root"]}"#)
        try w.bundle("dup.one", folder: "dup1")
        try w.bundle("dup.one", folder: "dup2")
        // Unusable, and its identifier is a usable bundle's: logged, not listed in its place.
        let brokenDup = try w.rawBundle("dupbroken", manifest: #"{"identifier": "dup.one", "version": 1}"#)
        let sv = try RunningSupervisor(w)
        let log = sv.log
        #expect(log.contains("\(noVersion)/plugin.json: field 'version': missing"))
        #expect(log.contains("\(badID)/plugin.json: field 'identifier'"))
        #expect(log.contains("\(garbage)/plugin.json: not valid JSON"))
        #expect(log.contains("\(badVersion)/plugin.json: field 'version': '1.0' is not a semantic version"))
        #expect(log.contains("\(badPerm)/plugin.json: field 'permissions[0]': unknown permission 'root'"))
        #expect(log.contains("dup2/plugin.json: field 'identifier': duplicate identifier dup.one, already used by"))
        #expect(log.contains("\(brokenDup)/plugin.json: field 'version'") && log.contains("(not listed: dup.one is "), "\(log)")
        // Each unusable bundle is listed as failed (under its identifier when it has a valid one, else
        // its folder's name), with the error; the duplicate is only logged.
        let status = try sv.status()
        #expect(status.map(\.identifier).sorted() == ["bad.noversion", "bad.perm", "bad.version", "badid", "dup.one", "garbage"])
        for p in status where p.identifier != "dup.one" {
            #expect(p.state == "failed" && p.restarts == 0 && p.lastError?.contains("/plugin.json: ") == true, "\(p)")
        }
        #expect(status.first { $0.identifier == "garbage" }?.lastError?.contains("\(garbage)/plugin.json: not valid JSON") == true)
        #expect(status.first { $0.identifier == "dup.one" }?.state == "running")
    }
}
