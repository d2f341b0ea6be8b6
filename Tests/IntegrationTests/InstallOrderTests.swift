import Foundation
import IPC
import Protocol
import SupervisorClient
import Testing

/// Installs and updates that meet other plugins: a dependent's version range, and SPEC §16's
/// `onCall` activation.
extension InstallTests {
    @Test("an update that would leave an installed dependent unable to start (a version outside its range) is refused, naming the dependent; nothing changes")
    func updateOutsideADependentsRange() throws {
        let w = try TestWorld()
        let shop = try Shop(w)
        let a1 = try shop.archive("r.a", "1.0.0")
        let a2 = try shop.archive("r.a", "2.0.0")
        let b = try shop.archive("r.b", "1.0.0", extra: ["dependencies": [["id": "r.a", "version": ">=1.0.0 <2.0.0"]]])
        let sv = try start(w, config: try shop.config())
        for name in [a1, b] {
            let r = try sv.cli("install", shop.server.base + "/" + name)
            #expect(r.code == 0, "\(name): \(r.out)\(r.err)")
        }
        let refused = try sv.cli("install", shop.server.base + "/" + a2)
        #expect(refused.code != 0 && refused.err.contains("r.a 2.0.0 would leave r.b unable to start") && refused.err.contains(">=1.0.0 <2.0.0"),
                "\(refused.out)\(refused.err)")
        let a = try sv.plugin("r.a")
        #expect(a.version == "1.0.0" && a.state == "running", "\(a.version) \(a.state)")
        #expect(try sv.plugin("r.b").state == "running")
        #expect(try sv.call("r.b", "echo", "3", as: Int.self) == 3)
    }

    @Test("update applies the catalog's new versions dependencies first, whatever order the catalog lists them in: a dependent's version that needs its dependency's new one is installed in the same run")
    func updateInDependencyOrder() throws {
        let w = try TestWorld()
        let shop = try Shop(w)
        let lib1 = try shop.archive("r.lib", "1.0.0")
        let app1 = try shop.archive("r.app", "1.0.0", extra: ["dependencies": [["id": "r.lib", "version": ">=1.0.0 <2.0.0"]]])
        let sv = try start(w, config: try shop.config())
        for name in [lib1, app1] {
            let r = try sv.cli("install", shop.server.base + "/" + name)
            #expect(r.code == 0, "\(name): \(r.out)\(r.err)")
        }
        // The dependent listed first, needing the dependency's new version.
        let app2 = try shop.archive("r.app", "1.1.0", extra: ["dependencies": [["id": "r.lib", "version": ">=1.1.0 <2.0.0"]]])
        let lib2 = try shop.archive("r.lib", "1.1.0")
        try shop.offer("r.app", "1.1.0", archive: app2)
        try shop.offer("r.lib", "1.1.0", archive: lib2)
        let r = try sv.cli("update")
        #expect(r.code == 0, "\(r.out)\(r.err)")
        #expect(try sv.plugin("r.lib").version == "1.1.0")
        #expect(try sv.plugin("r.app").version == "1.1.0")
    }

    @Test("a dependency and its dependent updated, then the supervisor killed within their grace periods: the next start puts both previous versions back and applies both updates again, the dependency first")
    func interruptedUpdatesResumeInDependencyOrder() throws {
        let w = try TestWorld()
        let shop = try Shop(w)
        let config = try shop.config(extra: ["updateGraceSeconds": 60])
        let sv = try start(w, config: config)
        for name in [try shop.archive("r.lib", "1.0.0"),
                     try shop.archive("r.app", "1.0.0", extra: ["dependencies": [["id": "r.lib", "version": ">=1.0.0 <2.0.0"]]])] {
            let r = try sv.cli("install", shop.server.base + "/" + name)
            #expect(r.code == 0, "\(name): \(r.out)\(r.err)")
        }
        try shop.offer("r.app", "1.1.0", archive: try shop.archive("r.app", "1.1.0", extra: ["dependencies": [["id": "r.lib", "version": ">=1.1.0 <2.0.0"]]]))
        try shop.offer("r.lib", "1.1.0", archive: try shop.archive("r.lib", "1.1.0"))
        let r = try sv.cli("update")
        #expect(r.code == 0, "\(r.out)\(r.err)")
        kill(sv.pid, SIGKILL)
        _ = try sv.waitForExit()
        let again = try start(w, config: config)
        try again.waitUntil("both updates applied again") {
            again.log.contains("r.lib: the interrupted update is done") && again.log.contains("r.app: the interrupted update is done")
        }
        #expect(try again.plugin("r.lib").version == "1.1.0")
        #expect(try again.plugin("r.app").version == "1.1.0")
        let lib = try #require(again.log.range(of: "r.lib: the interrupted update is done"))
        let app = try #require(again.log.range(of: "r.app: its update to 1.1.0 had not ended"))
        #expect(lib.lowerBound < app.lowerBound, "r.app's update was tried before r.lib's was done")
    }

    @Test("an onCall plugin installed, or updated while inactive, is started to prove that it loads, then stops until it is needed (not counted as a restart); a call starts it")
    func onCallInstallsStayInactive() throws {
        let w = try TestWorld()
        let shop = try Shop(w)
        let v1 = try shop.archive("o.lazy", "1.0.0", extra: ["activation": "onCall"])
        let v2 = try shop.archive("o.lazy", "1.1.0", extra: ["activation": "onCall"])
        let sv = try start(w, config: try shop.config())
        let first = try sv.cli("install", shop.server.base + "/" + v1)
        #expect(first.code == 0 && first.out.contains("o.lazy 1.0.0"), "\(first.out)\(first.err)")
        try sv.waitUntil("o.lazy inactive after its install") { try sv.plugin("o.lazy").state == "inactive" }
        #expect(try sv.plugin("o.lazy").pid == nil)
        let update = try sv.cli("install", shop.server.base + "/" + v2)
        #expect(update.code == 0 && update.out.contains("o.lazy 1.1.0 (was 1.0.0)"), "\(update.out)\(update.err)")
        try sv.waitUntil("o.lazy inactive after its update") { let p = try sv.plugin("o.lazy"); return p.state == "inactive" && p.version == "1.1.0" }
        // Tried, not restarted: nothing of it was running.
        #expect(try sv.plugin("o.lazy").restarts == 0)
        #expect(try sv.call("o.lazy", "echo", "5", as: Int.self) == 5)
        #expect(try sv.plugin("o.lazy").state == "running")
        #expect(sv.log.contains("o.lazy 1.0.0 loads and starts; it is onCall, so it stops until it is needed"))
    }

    @Test("a plugin uninstalled while its update from the catalog downloads stays uninstalled: the update says so, and installs nothing")
    func anUpdateDoesNotBringBackAnUninstalledPlugin() async throws {
        let w = try TestWorld()
        let shop = try Shop(w)
        let v1 = try shop.archive("u.gone", "1.0.0")
        let v2 = try shop.archive("u.gone", "2.0.0")
        let sv = try start(w, config: try shop.config())
        #expect(try sv.cli("install", shop.server.base + "/" + v1).code == 0)
        try shop.offer("u.gone", "2.0.0", archive: v2)
        shop.entries[0]["url"] = "slow/" + v2
        try shop.publishCatalog()
        let update = Task.detached { try sv.cli("update") }
        try sv.waitUntil("the update's download to start") { try shop.server.count("/slow/" + v2) == 1 }
        let uninstall = try sv.cli("uninstall", "u.gone")
        #expect(uninstall.code == 0, "\(uninstall.err)")
        let answer = try await update.value
        #expect(answer.code != 0 && answer.out.contains("u.gone was uninstalled while its update downloaded; not installed"), "\(answer.out) \(answer.err)")
        #expect(try !sv.status().contains { $0.identifier == "u.gone" })
        #expect(w.installed()["u.gone"] == nil && !FileManager.default.fileExists(atPath: w.home + "/plugins/u.gone"))
    }

    @Test("an inactive plugin that an update tries or a restart starts is announced activated (update, restart); a version that fails to start is rolled back without a failed event")
    func inactivePluginsStartsAnnounced() throws {
        let w = try TestWorld()
        let shop = try Shop(w)
        let v1 = try shop.archive("o.lazy", "1.0.0", extra: ["activation": "onCall"])
        let bad = try shop.archive("o.lazy", "1.1.0", extra: ["activation": "onCall"], files: ["fail-startup": ""])
        let sv = try start(w, config: try shop.config())
        #expect(try sv.cli("install", shop.server.base + "/" + v1).code == 0)
        try sv.waitUntil("o.lazy inactive after its install") { try sv.plugin("o.lazy").state == "inactive" }
        let file = w.root + "/events.json"
        let follower = try ClientTests.follow(sv, ["--json", "--plugin", "o.lazy"], to: file)
        defer { follower.terminate() }
        try sv.waitUntil("the follower to listen") { try sv.cli("metrics").out.contains("supervisor_host_event_listeners 1") }
        let update = try sv.cli("install", shop.server.base + "/" + bad)
        #expect(update.code != 0 && update.err.contains("rolled back to 1.0.0"), "\(update.out)\(update.err)")
        try sv.waitUntil("o.lazy inactive at 1.0.0 again") { let p = try sv.plugin("o.lazy"); return p.state == "inactive" && p.version == "1.0.0" }
        let lastError = try sv.plugin("o.lazy").lastError ?? ""
        #expect(lastError.hasPrefix("the update to 1.1.0 was rolled back to 1.0.0: it failed to start"), "\(lastError)")
        let restart = try sv.cli("restart", "o.lazy")
        #expect(restart.code == 0, "\(restart.err)")
        let events = try sv.waitFor("the restart's started") { () -> [HostEvent]? in
            let lines = ((try? String(contentsOfFile: file, encoding: .utf8)) ?? "").split(separator: "\n")
            let events = lines.compactMap { try? JSONDecoder().decode(HostEvent.self, from: Data($0.utf8)) }
            return events.filter { $0.event == .started }.count == 2 ? events : nil
        }
        #expect(!events.contains { $0.event == .failed }, "\(events.map(\.event))")
        #expect(events.filter { $0.event == .activated }.map(\.trigger) == ["update", "restart"], "\(events.map(\.event))")
        #expect(events.last?.event == .started && events.dropLast().last?.event == .activated, "\(events.map(\.event))")
    }
}

extension InstallTests {
    @Test("an update's old worker, once it has drained, is announced `exited` (reason stopped) to events readers, after `updated` and the new worker's `started`")
    func updateAnnouncesTheOldWorkersExit() async throws {
        let w = try TestWorld()
        let shop = try Shop(w)
        let v1 = try shop.archive("e.up", "1.0.0")
        let v2 = try shop.archive("e.up", "1.0.1")
        let sv = try start(w, config: try shop.config())
        #expect(try sv.cli("install", shop.server.base + "/" + v1).code == 0)
        let old = try #require(try sv.plugin("e.up").pid)
        let client = try await SupervisorClient.connect(socket: sv.socket)
        defer { client.close() }
        var events = try await client.followEvents(plugin: "e.up").makeAsyncIterator()
        let update = try sv.cli("install", shop.server.base + "/" + v2)
        #expect(update.code == 0, "\(update.out)\(update.err)")
        let updated = try await nextEvent(&events, "updated") { $0.event == .updated }
        #expect(updated.from == "1.0.0" && updated.to == "1.0.1")
        let exited = try await nextEvent(&events, "exited of the old worker") { $0.event == .exited }
        #expect(exited.pid == old && exited.lastExit?.reason == .stopped, "\(exited)")
    }
}

extension InstallTests {
    @Test("a new plugin that fails to start is not installed, and leaves no data or live folder behind")
    func failedFirstInstallLeavesNothing() throws {
        let w = try TestWorld()
        let shop = try Shop(w)
        let bad = try shop.archive("f.bad", "1.0.0", files: ["fail-startup": ""])
        let sv = try start(w, config: try shop.config())
        let r = try sv.cli("install", shop.server.base + "/" + bad)
        #expect(r.code != 0 && r.err.contains("f.bad 1.0.0 failed to start") && r.err.contains("not installed"), "\(r.out)\(r.err)")
        #expect(try !sv.status().contains { $0.identifier == "f.bad" })
        for folder in ["data", "live", "plugins"] {
            #expect(!FileManager.default.fileExists(atPath: w.home + "/\(folder)/f.bad"), "\(folder)/f.bad is left")
        }
    }
}

extension RescanTests {
    @Test("a reload that finds another version on disk announces it `updated` (from, to) before the new worker's `started`, as an install does")
    func reloadAnnouncesTheNewVersion() async throws {
        let w = try TestWorld()
        try w.bundle("hup.versioned")
        let sv = try RunningSupervisor(w)
        let client = try await SupervisorClient.connect(socket: sv.socket)
        defer { client.close() }
        var events = try await client.followEvents(plugin: "hup.versioned").makeAsyncIterator()
        try w.bundle("hup.versioned", version: "1.1.0")
        #expect(try sv.cli("reload").code == 0)
        var before: [HostEvent] = []
        let started = try await nextEvent(&events, "started") { event in
            before.append(event)
            return event.event == .started
        }
        #expect(started.version == "1.1.0", "\(started)")
        let updated = before.first { $0.event == .updated }
        #expect(updated?.from == "1.0.0" && updated?.to == "1.1.0", "\(before.map(\.event))")
    }
}

extension InstallTests {
    @Test("uninstall while a call waits for the plugin's activation (a slow start and willTerminate): the caller is answered unavailable, naming the uninstall")
    func uninstallWhileACallWaits() throws {
        let w = try TestWorld()
        let shop = try Shop(w)
        let lazy = try shop.archive("u.lazy", "1.0.0", extra: ["activation": "onCall"], files: ["startup-delay-ms": "800", "terminate-delay-ms": "800"])
        let sv = try start(w, config: try shop.config())
        #expect(try sv.cli("install", shop.server.base + "/" + lazy).code == 0)
        try sv.waitUntil("u.lazy inactive after its install") { try sv.plugin("u.lazy").state == "inactive" }
        let raw = try rawControl(sv.socket)
        defer { raw.close() }
        try raw.sendFrame([UInt8].frame(body: Array(#"{"type":"call","id":1,"target":"u.lazy","method":"echo","params":[1]}"#.utf8)))
        try sv.waitUntil("u.lazy starting for the call") { try sv.plugin("u.lazy").state == "starting" }
        let uninstalled = try sv.cli("uninstall", "u.lazy")
        #expect(uninstalled.code == 0, "\(uninstalled.err)")
        let answer = String(decoding: try #require(try raw.receiveFrame()), as: UTF8.self)
        #expect(answer.contains(#""code":"unavailable""#) && (answer.contains("u.lazy is stopped: being uninstalled") || answer.contains("u.lazy was uninstalled")),
                "\(answer)")
    }
}

extension InstallTests {
    @Test("install of a FIFO or a device is refused at once, naming what it is: the installs behind it are not held up")
    func installOfASpecialFile() throws {
        let w = try TestWorld()
        let shop = try Shop(w)
        let good = try shop.archive("s.good", "1.0.0")
        let sv = try start(w, config: try shop.config())
        let fifo = w.root + "/archive.fifo"
        #expect(mkfifo(fifo, 0o600) == 0)
        let r = try sv.cli("install", fifo)
        #expect(r.code != 0 && r.err.contains("archive.fifo, a FIFO and not a regular file"), "\(r.err)")
        let device = try sv.cli("install", "/dev/zero")
        #expect(device.code != 0 && device.err.contains("/dev/zero, a character device and not a regular file"), "\(device.err)")
        let next = try sv.cli("install", shop.server.base + "/" + good)
        #expect(next.code == 0, "\(next.err)")
    }
}

extension InstallTests {
    @Test("an uninstall whose bundle cannot leave the plugins folder (immutable) is refused with nothing changed: the plugin runs on and answers; once it can, the uninstall goes through")
    func uninstallThatCannotMoveTheBundle() throws {
        let w = try TestWorld()
        let shop = try Shop(w)
        let archive = try shop.archive("u.kept", "1.0.0")
        let sv = try start(w, config: try shop.config())
        #expect(try sv.cli("install", shop.server.base + "/" + archive).code == 0)
        let pid = try sv.plugin("u.kept").pid
        // The folder immutable (as root): no name in it can change.
        let plugins = w.home + "/plugins"
        guard try Shell.run("/usr/bin/chattr", ["+i", plugins]).code == 0 else {
            Issue.record("chattr +i is not possible on \(plugins): the test needs a file system with attributes (ext4, xfs)")
            return
        }
        defer { _ = try? Shell.run("/usr/bin/chattr", ["-i", plugins]) }
        let refused = try sv.cli("uninstall", "u.kept")
        #expect(refused.code != 0 && refused.err.contains("fileSystem: cannot remove \(plugins)/u.kept"), "\(refused.err)")
        let after = try sv.plugin("u.kept")
        #expect(after.state == "running" && after.pid == pid && after.lastError == nil, "\(after.state) \(after.lastError ?? "")")
        #expect(try sv.call("u.kept", "echo", "[1]", as: [Int].self) == [1])
        _ = try Shell.run("/usr/bin/chattr", ["-i", plugins])
        let done = try sv.cli("uninstall", "u.kept")
        #expect(done.code == 0, "\(done.err)")
        #expect(w.installed().isEmpty)
        #expect(try sv.status().contains { $0.identifier == "u.kept" } == false)
    }
}
