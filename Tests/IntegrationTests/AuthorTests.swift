import Foundation
import PluginProtocol
import Protocol
import Testing

/// What a plugin author meets first (SPEC §6): a plugin that cannot load for a reason no restart
/// cures fails at once, with one log line and a `lastError` naming the file and the fix; a plugin
/// that never answers `startup` holds the ready line for one startup timeout only.
@Suite(.serialized, .timeLimit(.minutes(3)))
struct AuthorTests {
    /// Log lines that mention `id` (the supervisor's own lines name plugins in text or metadata).
    static func lines(_ log: String, about id: String) -> [Substring] {
        log.split(separator: "\n").filter { $0.contains(id) }
    }

    @Test("load failures a restart cannot cure: failed at once, 0 restarts, one log line, lastError with the file and the fix")
    func loadFailuresFailOnce() throws {
        let w = try TestWorld()
        func manifest(_ folder: String, _ text: String) throws {
            try FileManager.default.createDirectory(atPath: w.plugins + "/" + folder, withIntermediateDirectories: true)
            try text.write(toFile: w.plugins + "/" + folder + "/plugin.json", atomically: true, encoding: .utf8)
        }
        try manifest("f.comma", "{\n  \"identifier\": \"f.comma\",\n  \"version\": \"1.0.0\",\n  \"library\": \"libx.so\",\n}\n")
        try manifest("f.type", #"{"identifier": "f.type", "version": 3, "library": "libx.so"}"#)
        let missing = try w.bundle("f.missing")
        try FileManager.default.removeItem(atPath: missing + "/libTestKit.so")
        try w.bundle("f.nosymbol", library: try Build.cLibrary("nosymbol", source: "int nothing_here(void) { return 1; }\n"))
        try w.bundle("f.abi", library: try Build.cLibrary("wrongabi", source: """
            #include "sp_plugin.h"
            static void r(void *c, const uint8_t *j, size_t l) { (void)c; (void)j; (void)l; }
            static const sp_plugin p = { 99, 0, r, 0 };
            const sp_plugin *sp_plugin_create(const sp_host *h) { (void)h; return &p; }
            """))
        // Greeter's library says it implements com.example.greeter.
        try w.bundle("f.identity", library: Build.library("Greeter"))
        try w.bundle("f.noexport", library: Build.library("NoExport"))
        try w.bundle("f.fine")
        let started = Date()
        let sv = try RunningSupervisor(w)
        let readyAfter = Date().timeIntervalSince(started)
        let expected: [String: [String]] = [
            "f.comma": ["f.comma/plugin.json", "line 5, column 1", "trailing comma", "supervisor reload"],
            "f.type": ["f.type/plugin.json", "field 'version'", "wrong type"],
            "f.missing": ["loadError", "f.missing/libTestKit.so", "cannot open shared object file", "supervisor restart f.missing"],
            "f.nosymbol": ["missingSymbol", "libnosymbol.so does not export sp_plugin_create", "sp_plugin.h"],
            "f.abi": ["abiMismatch", "speaks ABI version 99", "rebuild the plugin"],
            "f.identity": ["identifierMismatch", "implements com.example.greeter but was loaded as f.identity",
                           #"set "identifier": "com.example.greeter" in "#, "f.identity/plugin.json"],
            "f.noexport": ["missingSymbol", "built with the Swift PluginSDK", #"@_cdecl("sp_plugin_create")"#, "PluginExport.create"],
        ]
        let status = try sv.status()
        for (id, words) in expected {
            let p = try #require(status.first { $0.identifier == id }, "\(id) is not in status")
            #expect(p.state == "failed" && p.restarts == 0, "\(id): \(p.state), \(p.restarts) restarts")
            let lastError = p.lastError ?? ""
            for word in words { #expect(lastError.contains(word), "\(id)'s lastError lacks '\(word)': \(lastError)") }
            let logged = Self.lines(sv.log, about: id)
            #expect(logged.count == 1, "\(id) is logged \(logged.count) times:\n\(logged.joined(separator: "\n"))")
        }
        #expect(status.first { $0.identifier == "f.fine" }?.state == "running")
        // Each fails on its first try: the ready line is not held up by restarts.
        if Build.sanitizerEnvironment.isEmpty { #expect(readyAfter < 5, "ready after \(readyAfter) s") }
        // The table names the file and the fix too.
        #expect(try sv.cli("status").out.contains("f.comma: \(w.plugins)/f.comma/plugin.json: not valid JSON at line 5, column 1"))
        // Fixed on disk and reloaded: it runs.
        try manifest("f.comma", #"{"identifier": "f.comma", "version": "1.0.0", "library": "libTestKit.so"}"#)
        try FileManager.default.linkItem(atPath: Build.library("TestKit"), toPath: w.plugins + "/f.comma/libTestKit.so")
        #expect(try sv.cli("reload").code == 0)
        #expect(try sv.plugin("f.comma").state == "running")
    }

    @Test("a plugin that never answers startup is killed at its startup timeout, which is all the ready line waits for")
    func startupTimeout() throws {
        let w = try TestWorld()
        let hang = try w.bundle("t.hang", extra: ["limits": ["startupTimeoutMs": 700]])
        try "60000".write(toFile: hang + "/startup-delay-ms", atomically: true, encoding: .utf8)
        try w.bundle("t.fine")
        let started = Date()
        let sv = try RunningSupervisor(w)
        let readyAfter = Date().timeIntervalSince(started)
        if Build.sanitizerEnvironment.isEmpty { #expect(readyAfter < 5, "ready after \(readyAfter) s, for a 0.7 s startup timeout") }
        #expect(sv.stdout.contains("1 plugin running"), "\(sv.stdout)")
        let p = try sv.plugin("t.hang")
        #expect(p.state != "running" && p.lastExit?.reason == .startupTimeout, "\(p)")
        #expect(p.lastError?.contains("failed to start") == true && p.lastError?.contains("startup not answered within 700 ms") == true,
                "\(p.lastError ?? "")")
        #expect(try sv.plugin("t.fine").state == "running")
    }

    @Test("a plugin-to-plugin call whose result is not the type the caller asked for names both")
    func resultTypeMismatch() throws {
        let w = try TestWorld()
        try w.bundle("m.callee")
        try w.bundle("m.caller", deps: [Dep("m.callee")])
        let sv = try RunningSupervisor(w)
        let r = try sv.cli("call", "m.caller", "callForInt", #"{"target": "m.callee", "method": "echo", "params": {"name": "Ada"}}"#)
        #expect(r.code != 0, "\(r.out)")
        #expect(r.err.contains("the result of m.callee.echo is not a Int") && r.err.contains(#"it was {"name":"Ada"}"#), "\(r.err)")
        #expect(r.err.contains("found a") || r.err.contains("but found"), "the actual type is not named: \(r.err)")
    }

    @Test("start --debug: the plugin has no watchdog and no call timeout, the others keep theirs")
    func debugMode() throws {
        let w = try TestWorld()
        try w.bundle("d.debugged")
        try w.bundle("d.other")
        let config = w.root + "/config.json"
        try #"{"pingIntervalMs": 100, "pingTimeoutMs": 400, "idleCheckIntervalMs": 200}"#.write(toFile: config, atomically: true, encoding: .utf8)
        let sv = try RunningSupervisor(w, args: ["--config", config, "--debug", "d.debugged"])
        #expect(try sv.plugin("d.debugged").debug == true && sv.plugin("d.other").debug == nil)
        #expect(sv.log.contains("d.debugged runs in debug mode"))
        #expect(try sv.cli("status").out.contains("d.debugged: debug mode (attach with gdb -p "))
        // A call past its timeout is still answered (a breakpoint may hold it for long).
        let slow = try sv.cli("call", "d.debugged", "sleep", #"{"ms": 600}"#, "--timeout", "200")
        #expect(slow.code == 0 && slow.out.contains("600"), "\(slow.err)")
        // Both workers stopped as a debugger stops its process: the watchdog kills the other one,
        // and when it has, the debugged one is still the same worker.
        let debugged = try #require(try sv.plugin("d.debugged").pid)
        let other = try #require(try sv.plugin("d.other").pid)
        kill(debugged, SIGSTOP)
        kill(other, SIGSTOP)
        try sv.waitUntil("the watchdog to end d.other") { try sv.plugin("d.other").lastExit?.reason == .watchdog }
        let p = try sv.plugin("d.debugged")
        #expect(p.pid == debugged && p.restarts == 0 && p.lastExit == nil, "\(p)")
        kill(debugged, SIGCONT)
        #expect(try sv.call("d.debugged", "echo", "[3]", as: [Int].self) == [3])
    }

    @Test("restart answers with the state after the restart")
    func restartReply() throws {
        let w = try TestWorld()
        try w.bundle("r.one")
        let sv = try RunningSupervisor(w)
        let r = try sv.cli("restart", "r.one")
        #expect(r.code == 0, "\(r.err)")
        let after = try ProtocolJSON.decode(PluginStatus.self, from: Array(r.out.utf8))
        let now = try sv.plugin("r.one")
        #expect(after.state == "running" && after.restarts == 1 && after.pid == now.pid, "\(r.out)")
    }

    @Test("a command right after start: --wait waits for the supervisor to come up, and the call for its plugin")
    func commandRightAfterStart() throws {
        let w = try TestWorld()
        let slow = try w.bundle("s.slow")
        try "300".write(toFile: slow + "/startup-delay-ms", atomically: true, encoding: .utf8)
        try FileManager.default.removeItem(atPath: w.home)   // a home the supervisor has yet to make
        let sv = try RunningSupervisor(w, waitForReady: false)
        let r = try sv.cli("call", "--wait", "20", "s.slow", "echo", "[5]")
        #expect(r.code == 0 && r.out.contains("5"), "\(r.err)")
        let none = try Shell.run(Build.supervisor, ["status", "--home", w.root + "/no-such-home"])
        #expect(none.code == 2 && none.err.hasPrefix("unavailable: cannot reach the supervisor"), "\(none.err)")
        // SPEC §6: call and open print their errors as `code: message`, also those caught before
        // anything is sent (bad usage, exit 64).
        let badJSON = try sv.cli("call", "s.slow", "echo", "not json")
        #expect(badJSON.code == 64 && badJSON.err.hasPrefix("badRequest: <json-params> is not valid JSON"), "\(badJSON.err)")
        let badID = try sv.cli("call", "bad id!", "echo")
        #expect(badID.code == 64 && badID.err.hasPrefix("badRequest: 'bad id!' is not a plugin identifier"), "\(badID.err)")
        let badURI = try sv.cli("open", "http://x/y")
        #expect(badURI.code == 64 && badURI.err.hasPrefix("badRequest: 'http://x/y' is not a plugin://"), "\(badURI.err)")
        // A value ArgumentParser refuses is a `code: message` too; `-1` is read as the value it is.
        let negative = try sv.cli("call", "--timeout", "-1", "s.slow", "echo")
        #expect(negative.code == 64 && negative.err.hasPrefix("badRequest: The value '-1' is invalid for '--timeout <timeout>'"), "\(negative.err)")
        let badTarget = try sv.cli("send", "background", "--plugin", "x y")
        #expect(badTarget.code == 64 && badTarget.err.hasPrefix("badRequest: 'x y' is not a plugin identifier"), "\(badTarget.err)")
        // An argument that is not UTF-8 (a 0xFF byte in a path) is refused, not read as another path.
        let bytes = try Shell.run("/bin/sh", ["-c", #""$0" status --home "$(printf '/tmp/x\377')""#, Build.supervisor])
        #expect(bytes.code == 64 && bytes.err.hasPrefix("badRequest: argument 3") && bytes.err.contains("is not UTF-8"), "\(bytes.err)")
        let noArchive = try sv.cli("install", "")
        #expect(noArchive.code == 64 && noArchive.err.hasPrefix("badRequest: <archive> is empty"), "\(noArchive.err)")
        let folder = try sv.cli("install", w.plugins)
        #expect(folder.code == 64 && folder.err.contains("is a folder: install takes an archive of a bundle"), "\(folder.err)")
    }

    @Test("a relative --home works: the workers get absolute paths")
    func relativeHome() throws {
        let w = try TestWorld()
        try w.bundle("h.one")
        let sv = try RunningSupervisor(w, args: ["--home", "home", "--plugins", "plugins"], directory: w.root)
        #expect(try sv.plugin("h.one").state == "running")
        #expect(try sv.cli("call", "h.one", "echo", "[1]").out.contains("1"))
    }

    @Test("a control socket path of 104 to 107 bytes (what Linux holds, not what SwiftNIO takes) stops start with the limit, not an error's name")
    func aSocketPathTooLongForNIO() throws {
        let w = try TestWorld()
        var path = w.root + "/"
        path += String(repeating: "s", count: 105 - path.utf8.count)
        let run = try Shell.run(Build.supervisor, ["start", "--home", w.home, "--plugins", w.plugins, "--socket", path], timeout: 30)
        #expect(run.code == 1 && run.err.contains("the path is 105 bytes long, and a Unix socket's path holds 103 at most: give a shorter --socket"),
                "\(run.code) \(run.err)")
    }

    @Test("a manifest field spelt almost as one the supervisor has is warned of, with the field meant, at start and at a reload; the plugin runs")
    func misspelledFieldsAreWarned() throws {
        let w = try TestWorld()
        try w.bundle("m.typo", extra: ["limits": ["callTimeoutMS": 100]])
        let sv = try RunningSupervisor(w)
        #expect(try sv.plugin("m.typo").state == "running")
        let line = "field 'limits.callTimeoutMS' is not a manifest field and is ignored; did you mean 'callTimeoutMs'?"
        #expect(sv.log.contains(line), "\(sv.log)")
        try w.bundle("m.later", extra: ["permission": ["network"]])
        #expect(try sv.cli("reload").code == 0)
        #expect(sv.log.contains("field 'permission' is not a manifest field and is ignored; did you mean 'permissions'?"), "\(sv.log)")
    }

    /// A bundle `id` with a copy of its own of TestKit's library (not a link to the build's: the
    /// tests change it), `restart: never`, running and called once.
    static func ownLibraryRunning(_ id: String, in w: TestWorld) throws -> (bundle: String, sv: RunningSupervisor) {
        let bundle = w.plugins + "/" + id
        try FileManager.default.createDirectory(atPath: bundle, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: Build.library("TestKit"), toPath: bundle + "/libTestKit.so")
        try #"{"identifier": "\#(id)", "version": "1.0.0", "library": "libTestKit.so", "restart": "never"}"#
            .write(toFile: bundle + "/plugin.json", atomically: true, encoding: .utf8)
        let sv = try RunningSupervisor(w)
        #expect(try sv.cli("call", id, "echo", "[1]").code == 0)
        return (bundle, sv)
    }

    @Test("a library written over under its running worker is named libraryReplaced, with the safe way to replace one")
    func libraryWrittenOver() throws {
        let w = try TestWorld()
        let (bundle, sv) = try Self.ownLibraryRunning("l.swap", in: w)
        // What `cp new.so libTestKit.so` does first: truncate the file the worker has mapped.
        #expect(truncate(bundle + "/libTestKit.so", 0) == 0)
        _ = try sv.cli("call", "l.swap", "echo", "[2]")
        try sv.waitUntil("the worker to end") { try sv.plugin("l.swap").state == "failed" }
        let exit = try #require(try sv.plugin("l.swap").lastExit)
        #expect(exit.reason == .libraryReplaced, "\(exit)")
        #expect(exit.message?.contains("rename it over the old one") == true && exit.message?.contains("supervisor install") == true,
                "\(exit.message ?? "")")
    }

    @Test("a library replaced the safe way (a new file renamed over it) under a running worker: the worker's crash after that is its own signal, not libraryReplaced")
    func libraryRenamedOver() throws {
        let w = try TestWorld()
        let (bundle, sv) = try Self.ownLibraryRunning("l.renamed", in: w)
        try FileManager.default.copyItem(atPath: Build.library("TestKit"), toPath: bundle + "/.new.so")
        #expect(rename(bundle + "/.new.so", bundle + "/libTestKit.so") == 0)
        _ = try sv.cli("call", "l.renamed", "crash", #"{"how":"segv"}"#)
        try sv.waitUntil("the worker to end") { try sv.plugin("l.renamed").state == "failed" }
        let exit = try #require(try sv.plugin("l.renamed").lastExit)
        #expect(exit.reason == .signaled && exit.signal == "SIGSEGV", "\(exit)")
    }
}
