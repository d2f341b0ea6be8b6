import Bundles
import Foundation
import PluginInstall
import PluginProtocol
import SupervisorClient
import Testing

/// A publisher: an Ed25519 key pair that signs archives.
struct Publisher {
    let key = Ed25519.PrivateKey()
    var publicKeyBase64: String { key.publicKey.rawRepresentation.base64EncodedString() }

    func sign(_ path: String) throws -> String {
        try key.signature(for: Data(contentsOf: URL(fileURLWithPath: path))).base64EncodedString()
    }
}

/// The Python test web server over a folder.
final class WebServer: @unchecked Sendable {
    let root: String
    let process = Process()
    let port: Int

    init(root: String) throws {
        self.root = root
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fixtures/http_server.py").path
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", script, root]
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = FileHandle.nullDevice
        try process.run()
        var line = Data()
        while !line.contains(UInt8(ascii: "\n")) {
            let chunk = pipe.fileHandleForReading.availableData
            if chunk.isEmpty { throw HarnessError("the test web server did not start") }
            line.append(chunk)
        }
        port = Int(String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines))!
    }

    deinit { stop() }

    /// Ends the server (SIGKILL: the test runner's threads may block SIGTERM for their children).
    func stop() {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    var base: String { "http://127.0.0.1:\(port)" }

    /// Requests for `path` so far; with `status`, only those answered (in full) with that status.
    func count(_ path: String, status: Int? = nil) throws -> Int {
        Int(try Shell.run("/usr/bin/curl", ["-s", base + "/_count" + path + (status.map { "?status=\($0)" } ?? "")]).out) ?? -1
    }
}

/// Bundles, archives and a catalog for the install tests.
final class Shop: @unchecked Sendable {
    let world: TestWorld
    let publisher = Publisher()
    let dir: String
    let server: WebServer
    var entries: [[String: Any]] = []

    init(_ world: TestWorld) throws {
        self.world = world
        dir = world.root + "/shop"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        server = try WebServer(root: dir)
    }

    /// Makes a bundle folder of TestKit with a manifest, then an archive of `kind`; returns the archive's file name.
    @discardableResult
    func archive(_ id: String, _ version: String, kind: String = "tgz", extra: [String: Any] = [:], files: [String: String] = [:],
                 sign: Bool = true, library: String = Build.library("TestKit")) throws -> String {
        let bundle = try world.bundle(id, version: version, library: library, folder: "\(id)-\(version)-\(kind)", extra: extra, in: dir + "/src")
        for (name, content) in files { try content.write(toFile: bundle + "/" + name, atomically: true, encoding: .utf8) }
        let ext = ["tgz": "tar.gz", "txz": "tar.xz", "tzst": "tar.zst", "zip": "zip"][kind] ?? "\(kind).tar.gz"
        let name = "\(id)-\(version)-\(kind).\(ext)"
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Fixtures/make_archive.py").path
        let r = try Shell.run("/usr/bin/env", ["python3", script, kind, dir + "/" + name, bundle], timeout: 120)
        guard r.code == 0 else { throw HarnessError("make_archive \(kind) failed: \(r.err)") }
        if sign { try publisher.sign(dir + "/" + name).write(toFile: dir + "/" + name + ".sig", atomically: true, encoding: .utf8) }
        return name
    }

    func sha256(_ name: String) throws -> String {
        SHA256.hash(data: try Data(contentsOf: URL(fileURLWithPath: dir + "/" + name))).map { String(format: "%02x", $0) }.joined()
    }

    /// Adds a catalog entry for an archive (signed by our publisher unless told otherwise).
    func offer(_ id: String, _ version: String, archive: String, onDemand: Bool = false, signature: String? = nil, sha256: String? = nil) throws {
        entries.removeAll { ($0["identifier"] as? String) == id }
        entries.append(["identifier": id, "version": version, "url": archive, "sha256": try sha256 ?? self.sha256(archive),
                        "signature": try signature ?? publisher.sign(dir + "/" + archive), "onDemand": onDemand])
        try publishCatalog()
    }

    /// The catalog's version: raised with every publication, as a publisher must.
    var catalogVersion = 0

    /// Writes catalog.json (version, expires, entries) and its signature, catalog.json.sig.
    /// `expires`: from now; `signers`: the keys whose signatures go in the .sig, one a line.
    func publishCatalog(version: Int? = nil, expires: TimeInterval = 86_400, signers: [Ed25519.PrivateKey]? = nil,
                        entries override: [[String: Any]]? = nil) throws {
        catalogVersion = version ?? catalogVersion + 1
        let when = ISO8601DateFormatter().string(from: Date().addingTimeInterval(expires))
        let document: [String: Any] = ["version": catalogVersion, "expires": when, "plugins": override ?? entries]
        let data = try JSONSerialization.data(withJSONObject: document, options: [.sortedKeys])
        try data.write(to: URL(fileURLWithPath: dir + "/catalog.json"))
        let lines = try (signers ?? [publisher.key]).map { try $0.signature(for: data).base64EncodedString() }
        try (lines.joined(separator: "\n") + "\n").write(toFile: dir + "/catalog.json.sig", atomically: true, encoding: .utf8)
    }

    /// `extra`: more settings, or these with other values.
    func config(updates: Bool = true, lowSpeed: Int = 15, maxBytes: Int = 64 << 20, catalog: String? = nil,
                extra: [String: Any] = [:]) throws -> String {
        let path = world.root + "/install-config.json"
        let json: [String: Any] = extra.merging(["catalog": catalog ?? server.base + "/catalog.json", "trustedKeys": [publisher.publicKeyBase64],
                                   "updates": updates, "downloadLowSpeedSeconds": lowSpeed, "downloadMaxBytes": maxBytes,
                                   // The previous version of an update is kept this long to roll back to (30 s by default).
                                   "updateGraceSeconds": 1]) { theirs, _ in theirs }
        try JSONSerialization.data(withJSONObject: json).write(to: URL(fileURLWithPath: path))
        return path
    }
}

extension TestWorld {
    /// What is in the home's plugins folder: folder → version.
    func installed() -> [String: String] {
        var out: [String: String] = [:]
        for name in (try? FileManager.default.contentsOfDirectory(atPath: home + "/plugins")) ?? [] {
            guard let data = FileManager.default.contents(atPath: home + "/plugins/\(name)/plugin.json"),
                  let json = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else { continue }
            out[name] = json["version"] as? String
        }
        return out
    }
}

@Suite(.serialized, .timeLimit(.minutes(6)))
struct InstallTests {
    /// A supervisor over the world's home plugins folder.
    func start(_ w: TestWorld, config: String) throws -> RunningSupervisor {
        try RunningSupervisor(w, args: ["--config", config])
    }

    @Test("install from a URL, update from the catalog while another plugin keeps answering, roll back a bad update")
    func installUpdateRollback() throws {
        let w = try TestWorld()
        let shop = try Shop(w)
        try FileManager.default.createDirectory(atPath: w.home + "/plugins", withIntermediateDirectories: true)
        try w.bundle("u.bystander", in: w.home + "/plugins")
        let v1 = try shop.archive("u.app", "1.0.0")
        let v2 = try shop.archive("u.app", "2.0.0", kind: "zip")
        let v3 = try shop.archive("u.app", "3.0.0", kind: "txz", files: ["fail-startup": "x"])
        let sv = try start(w, config: try shop.config())

        let r = try sv.cli("install", shop.server.base + "/" + v1)
        #expect(r.code == 0, "\(r.err)")
        #expect(r.out.contains("u.app 1.0.0"))
        #expect(try sv.plugin("u.app").state == "running")
        #expect(try sv.plugin("u.app").version == "1.0.0")

        try shop.offer("u.app", "2.0.0", archive: v2)
        let check = try sv.cli("update", "--check")
        #expect(check.out.contains(#""available":"2.0.0""#), "\(check.out) \(check.err)")
        let check2 = try sv.cli("update", "--check")
        #expect(check2.out.contains("notModified"), "a second check should cost a 304: \(check2.out)")

        // Update while a client calls the bystander continuously.
        let bystander = Tally()
        let socket = sv.socket
        let caller = Thread {
            while !bystander.stopped {
                let r = try? Shell.run(Build.supervisor, ["call", "--socket", socket, "u.bystander", "echo", "1"])
                if r?.code == 0 { bystander.add(ok: true) } else { bystander.add(failure: r?.err ?? "no result") }
            }
        }
        caller.start()
        let oldPID = try sv.plugin("u.app").pid
        let up = try sv.cli("update")
        bystander.finish()
        try sv.waitUntil("the bystander's caller to finish") { caller.isFinished }
        let seen = bystander.seen
        #expect(up.code == 0, "\(up.err)")
        #expect(up.out.contains("u.app 2.0.0 (was 1.0.0)"), "\(up.out)")
        let app = try sv.plugin("u.app")
        #expect(app.version == "2.0.0" && app.state == "running" && app.pid != oldPID)
        #expect(seen.failures.isEmpty && seen.ok > 0, "\(seen.failures.prefix(3))")
        #expect(try sv.plugin("u.bystander").restarts == 0)
        #expect(w.installed()["u.app"] == "2.0.0")
        // The previous version is kept for the grace period (1 s here), then deleted.
        try sv.waitUntil("the old version deleted after the grace period") {
            (try FileManager.default.contentsOfDirectory(atPath: w.home + "/staging")).isEmpty
        }

        // A bad update (its startup fails) is rolled back; the old version runs again.
        try shop.offer("u.app", "3.0.0", archive: v3)
        let bad = try sv.cli("update")
        #expect(bad.out.contains(#""failed":{"u.app""#), "\(bad.out)")
        #expect(bad.out.contains("rolled back to 2.0.0"))
        try sv.waitUntil("2.0.0 running again") { let p = try sv.plugin("u.app"); return p.state == "running" && p.version == "2.0.0" }
        #expect(w.installed()["u.app"] == "2.0.0")
        #expect(try sv.call("u.app", "echo", "5", as: Int.self) == 5)

        // The server goes away: the cached catalog still answers.
        shop.server.stop()
        let offline = try sv.cli("update", "--check")
        #expect(offline.code == 0, "\(offline.err)")
        #expect(offline.out.contains("cached (downloading"), "\(offline.out)")
        #expect(offline.out.contains(#""available":"3.0.0""#))
    }

    @Test("hostile and broken archives fail with a clear error and change nothing",
          arguments: [("slip", "path with '..'"), ("absolute", "absolute path"), ("symlink-escape", "leaves the bundle"),
                      ("symlink-chain", "/esc': symbolic link 'd/up/../' leaves the bundle"),
                      ("symlink-later", "/a': symbolic link 'b/x' leaves the bundle"),
                      ("symlink-sibling", "/other': symbolic link '../h.other' leaves the bundle"),
                      ("hardlink", "hard links"), ("device", "device nodes"), ("fifo", "FIFOs"), ("setuid", "setuid"),
                      ("bomb", "unpacks to more than"), ("two-bundles", "exactly one plugin bundle"),
                      ("beside", "holds 'README' beside its bundle folder")])
    func hostileArchives(_ kind: String, _ reason: String) throws {
        let w = try TestWorld()
        let shop = try Shop(w)
        try FileManager.default.createDirectory(atPath: w.home + "/plugins", withIntermediateDirectories: true)
        try w.bundle("h.app", version: "1.0.0", in: w.home + "/plugins")
        let archive = try shop.archive("h.app", "2.0.0", kind: kind)
        let sv = try start(w, config: try shop.config(maxBytes: 16 << 20))
        let before = w.installed()
        let r = try sv.cli("install", shop.server.base + "/" + archive)
        #expect(r.code != 0)
        #expect(r.err.contains(reason), "\(kind): \(r.err)")
        #expect(w.installed() == before)
        #expect(!FileManager.default.fileExists(atPath: "/tmp/absolute-escape.txt"))
        #expect(!FileManager.default.fileExists(atPath: "/tmp/written-through-link.txt"))
        #expect(!FileManager.default.fileExists(atPath: w.home + "/escaped.txt"))
        #expect(try sv.plugin("h.app").version == "1.0.0")
        #expect(try sv.plugin("h.app").state == "running")
    }

    @Test("integrity, versions and transport: each failure is clear and changes nothing")
    func refusals() throws {
        let w = try TestWorld()
        let shop = try Shop(w)
        try FileManager.default.createDirectory(atPath: w.home + "/plugins", withIntermediateDirectories: true)
        try w.bundle("r.app", version: "2.0.0", in: w.home + "/plugins")
        let good = try shop.archive("r.app", "3.0.0")
        let old = try shop.archive("r.app", "1.0.0")
        let unsigned = try shop.archive("r.app", "3.1.0", sign: false)
        let stranger = Publisher()
        let sv = try start(w, config: try shop.config(lowSpeed: 2))
        let before = w.installed()
        func fails(_ args: [String], _ expected: String) throws {
            let r = try sv.cli(args)
            #expect(r.code != 0, "\(args) succeeded")
            #expect(r.err.contains(expected), "\(args): \(r.err)")
            #expect(w.installed() == before)
        }
        // Signature by an unknown key.
        try stranger.sign(shop.dir + "/" + good).write(toFile: shop.dir + "/" + good + ".sig", atomically: true, encoding: .utf8)
        try fails(["install", shop.server.base + "/" + good], "not from a trusted publisher key")
        try shop.publisher.sign(shop.dir + "/" + good).write(toFile: shop.dir + "/" + good + ".sig", atomically: true, encoding: .utf8)
        // No signature at all.
        try fails(["install", shop.server.base + "/" + unsigned], "no signature")
        // A signature the server fails to serve is not a missing one, allowed unsigned or not.
        for extra in [[], ["--allow-unsigned"]] {
            try fails(["install", shop.server.base + "/sig-fails/" + good] + extra,
                      "the archive's signature could not be fetched (downloading \(shop.server.base)/sig-fails/\(good).sig failed: the server answered HTTP 500)")
        }
        // An empty .sig, and one too large to be a signature: each said as such, by its URL.
        for (prefix, text) in [("empty-", ""), ("big-", String(repeating: "A", count: 6_000))] {
            try FileManager.default.copyItem(atPath: shop.dir + "/" + good, toPath: shop.dir + "/" + prefix + good)
            try text.write(toFile: shop.dir + "/" + prefix + good + ".sig", atomically: true, encoding: .utf8)
        }
        try fails(["install", shop.server.base + "/empty-" + good], "/empty-\(good).sig is empty: it holds no signature")
        try fails(["install", shop.server.base + "/big-" + good], "/big-\(good).sig holds 6000 bytes, more than a signature file may (4096)")
        // A manifest that does not parse: named inside the archive, by its URL.
        let broken = try shop.archive("r.app", "3.2.0", files: ["plugin.json": #"{"identifier":"r.app","version":"3.2.0""#])
        try fails(["install", shop.server.base + "/" + broken], "invalidManifest: \(shop.server.base)/\(broken): r.app-3.2.0-tgz/plugin.json: ")
        // Wrong digest in the catalog.
        try shop.offer("r.app", "3.0.0", archive: good, sha256: String(repeating: "0", count: 64))
        try fails(["update"], "SHA-256 mismatch")
        // Downgrade, unless forced.
        try fails(["install", shop.server.base + "/" + old], "older than the installed 2.0.0; use --force")
        // Truncated download, a server that stalls, a redirect to file://.
        try fails(["install", shop.server.base + "/truncated/" + good], "downloading")
        let t0 = Date()
        try fails(["install", shop.server.base + "/hang"], "downloading")
        #expect(Date().timeIntervalSince(t0) < 20)
        try fails(["install", shop.server.base + "/redirect-file"], "downloading")
        // "Not modified" to a request that named no version: nothing here it could mean.
        try fails(["install", shop.server.base + "/not-modified/" + good], "the server answered HTTP 304 (not modified) to a request that named no version")
        // A redirect to another http port is followed.
        let other = try WebServer(root: shop.dir)
        let via = try sv.cli("install", shop.server.base + "/redirect-to/" + other.base + "/" + good)
        #expect(via.code == 0, "\(via.err)")
        #expect(w.installed()["r.app"] == "3.0.0")
        let forced = try sv.cli("install", "--force", shop.dir + "/" + old)
        #expect(forced.code == 0, "\(forced.err)")
        #expect(try sv.plugin("r.app").version == "1.0.0")
    }

    @Test("every archive format installs: tar.gz, tar.xz, tar.zst, zip; uninstall removes")
    func formatsAndUninstall() throws {
        let w = try TestWorld()
        let shop = try Shop(w)
        let sv = try start(w, config: try shop.config())
        for (i, kind) in ["tgz", "txz", "tzst", "zip"].enumerated() {
            let name = try shop.archive("fmt.\(kind)", "1.\(i).0", kind: kind)
            let r = try sv.cli("install", shop.dir + "/" + name)
            #expect(r.code == 0, "\(kind): \(r.err)")
            #expect(try sv.call("fmt.\(kind)", "echo", "1", as: Int.self) == 1)
        }
        // SPEC §10: supervisor_installs_total{outcome} counts each, failures by their error code.
        #expect(try sv.cli("install", shop.dir + "/no-such-archive.tar.gz").code != 0)
        let metrics = try Prometheus(sv.cli("metrics").out)
        #expect(metrics["supervisor_installs_total", ["outcome": "ok"]] == 4)
        let failed = metrics.samples.filter { $0.key.name == "supervisor_installs_total" && $0.key.labels["outcome"] != "ok" }
        #expect(failed.values.reduce(0, +) == 1, "\(failed)")
        let u = try sv.cli("uninstall", "fmt.zip")
        #expect(u.code == 0, "\(u.err)")
        #expect(w.installed()["fmt.zip"] == nil)
        #expect(try sv.status().contains { $0.identifier == "fmt.zip" } == false)
        #expect(try sv.cli("uninstall", "fmt.nothing").err.contains("no plugin fmt.nothing"))
    }

    @Test("onDemand: the first calls install the plugin, sharing one download, then get their answers")
    func onDemand() throws {
        let w = try TestWorld()
        let shop = try Shop(w)
        let archive = try shop.archive("od.lazy", "1.0.0")
        try shop.offer("od.lazy", "1.0.0", archive: archive, onDemand: true)
        let sv = try start(w, config: try shop.config())
        final class Results: @unchecked Sendable { let lock = NSLock(); var ok = 0; var errors: [String] = [] }
        let results = Results()
        let socket = sv.socket
        DispatchQueue.concurrentPerform(iterations: 4) { i in
            let r = try? Shell.run(Build.supervisor, ["call", "--socket", socket, "od.lazy", "echo", "\(i)"])
            results.lock.withLock {
                if r?.out.trimmingCharacters(in: .whitespacesAndNewlines) == "\(i)" { results.ok += 1 } else { results.errors.append(r?.err ?? "no result") }
            }
        }
        #expect(results.ok == 4, "\(results.errors)")
        #expect(try shop.server.count("/" + archive) == 1)
        #expect(try sv.plugin("od.lazy").state == "running")
        #expect(try sv.cli("call", "od.nothing", "echo", "1").err.contains("notFound: no plugin od.nothing is installed"))
        // Asked again at once, the same answer without another look at the catalog (one installer
        // run per name and 10 s, not one per call).
        let fetches = try shop.server.count("/catalog.json")
        for _ in 0..<3 { #expect(try sv.cli("call", "od.nothing", "echo", "1").err.contains("notFound: no plugin od.nothing is installed")) }
        #expect(try shop.server.count("/catalog.json") == fetches)
        // A new plugin whose dependency is missing is refused, and nothing is left behind.
        let needy = try shop.archive("od.needy", "1.0.0", extra: ["dependencies": ["od.absent"]])
        let r = try sv.cli("install", shop.dir + "/" + needy)
        #expect(r.code != 0)
        #expect(r.err.contains("dependency od.absent is not installed"), "\(r.err)")
        #expect(w.installed()["od.needy"] == nil)
        // An on-demand install that takes longer than the call's timeout answers `timeout`.
        try shop.offer("od.slow", "1.0.0", archive: "trickle/" + archive, onDemand: true,
                       signature: try shop.publisher.sign(shop.dir + "/" + archive), sha256: try shop.sha256(archive))
        let t0 = Date()
        let slow = try sv.cli("call", "--timeout", "500", "od.slow", "echo", "1")
        #expect(slow.err.contains("timeout: od.slow was still being installed on demand"), "\(slow.err)")
        #expect(Date().timeIntervalSince(t0) < 5)
    }

    @Test("live resources: refreshed at launch into the live folder, resourceUpdated sent, 304 changes nothing, switchable off")
    func liveResources() throws {
        let w = try TestWorld()
        let shop = try Shop(w)
        try FileManager.default.createDirectory(atPath: shop.dir + "/res", withIntermediateDirectories: true)
        try #"{"price": 2}"#.write(toFile: shop.dir + "/res/products.json", atomically: true, encoding: .utf8)
        try FileManager.default.createDirectory(atPath: w.home + "/plugins", withIntermediateDirectories: true)
        let bundle = try w.bundle("lr.shop", extra: ["resources": ["baseURL": shop.server.base + "/res", "files": ["products.json", "missing.json"], "refresh": "launch"]],
                                  in: w.home + "/plugins")
        try #"{"price": 1}"#.write(toFile: bundle + "/products.json", atomically: true, encoding: .utf8)
        try "bundled".write(toFile: bundle + "/missing.json", atomically: true, encoding: .utf8)

        // Updates off: nothing is fetched, the plugin sees its bundled files. A refresh at launch
        // would have been queued before the ready line, on the install queue that runs one job at a
        // time in order: once an install requested after it is answered, it would have happened.
        let marker = try shop.archive("lr.marker", "1.0.0")
        let off = try start(w, config: try shop.config(updates: false))
        let installed = try off.cli("install", shop.dir + "/" + marker)
        #expect(installed.code == 0, "\(installed.err)")
        #expect(try off.call("lr.shop", "resource", #"{"name":"products.json"}"#, as: [String: String].self)["content"] == #"{"price": 1}"#)
        #expect(try shop.server.count("/res/products.json") == 0)
        #expect(try shop.server.count("/catalog.json") == 0)
        #expect(try off.cli("stop").code == 0)
        _ = try off.waitForExit()

        let sv = try start(w, config: try shop.config())
        try sv.waitUntil("resourceUpdated") { try sv.info("lr.shop").names.contains("resourceUpdated:products.json") }
        let now = try sv.call("lr.shop", "resource", #"{"name":"products.json"}"#, as: [String: String].self)
        #expect(now["content"] == #"{"price": 2}"#)
        #expect(now["path"] == w.home + "/live/lr.shop/products.json")
        // A failed download (404) leaves the bundled copy in use.
        #expect(try sv.call("lr.shop", "resource", #"{"name":"missing.json"}"#, as: [String: String].self)["content"] == "bundled")
        #expect(try sv.cli("stop").code == 0)
        _ = try sv.waitForExit()

        // Next launch: a 304 changes nothing and sends no event. The files are refreshed in order,
        // so the warning about the last one (missing.json, a 404) means the supervisor is done with
        // the 304; an event sent after that reaches the plugin after any resourceUpdated it was sent
        // (a worker handles events one at a time, in order).
        let again = try start(w, config: try shop.config())
        try again.waitUntil("the conditional request answered with 304") { try shop.server.count("/res/products.json", status: 304) == 1 }
        try again.waitUntil("the refresh to finish") { again.log.contains("resource missing.json not refreshed") }
        #expect(try again.cli("send", "memoryWarning", "--plugin", "lr.shop").code == 0)
        try again.waitUntil("memoryWarning at lr.shop") { try again.info("lr.shop").names.contains("memoryWarning") }
        #expect(!(try again.info("lr.shop").names.contains("resourceUpdated:products.json")))
        #expect(try again.call("lr.shop", "resource", #"{"name":"products.json"}"#, as: [String: String].self)["content"] == #"{"price": 2}"#)
    }

    @Test("variants: the first whose requirements hold is loaded; none is a clear error listing each")
    func variants() throws {
        let w = try TestWorld()
        try FileManager.default.createDirectory(atPath: w.home + "/plugins", withIntermediateDirectories: true)
        let ok = try w.bundle("v.pick", in: w.home + "/plugins")
        try FileManager.default.copyItem(atPath: ok + "/libTestKit.so", toPath: ok + "/libGeneric.so")
        let manifest = #"{"identifier":"v.pick","version":"1.0.0","variants":[{"library":"libSparc.so","requires":{"arch":"sparc64"}},{"library":"libFuture.so","requires":{"kernel":">=99.0.0"}},{"library":"libGeneric.so","requires":{"arch":"x86_64|aarch64","sandbox":"seccomp"}}]}"#
        try manifest.write(toFile: ok + "/plugin.json", atomically: true, encoding: .utf8)
        let none = try w.bundle("v.none", in: w.home + "/plugins")
        try #"{"identifier":"v.none","version":"1.0.0","variants":[{"library":"a.so","requires":{"arch":"sparc64"}},{"library":"b.so","requires":{"kernel":"<2.0.0"}}]}"#
            .write(toFile: none + "/plugin.json", atomically: true, encoding: .utf8)
        let sv = try RunningSupervisor(w, args: ["--plugins", w.home + "/plugins"])
        let pick = try sv.plugin("v.pick")
        #expect(pick.state == "running")
        #expect(pick.variant == "libGeneric.so")
        let failed = try sv.plugin("v.none")
        #expect(failed.state == "failed")
        #expect(failed.error?.contains("no variant fits this host") == true)
        #expect(failed.error?.contains("a.so: needs arch sparc64") == true)
        #expect(failed.error?.contains("b.so: needs kernel <2.0.0") == true)
    }

    @Test("a new version whose library ends its worker as it loads (a crash, an exit) is refused naming the plugin, the version and how the worker ended")
    func aLibraryThatEndsItsWorkerAsItLoads() throws {
        let w = try TestWorld()
        let shop = try Shop(w)
        try FileManager.default.createDirectory(atPath: w.home + "/plugins", withIntermediateDirectories: true)
        try w.bundle("e.app", version: "1.0.0", in: w.home + "/plugins")
        let sv = try start(w, config: try shop.config())
        for (version, body, how) in [("2.0.0", "raise(SIGSEGV);", "(SIGSEGV)"), ("2.0.1", "exit(42);", "(exit code 42)")] {
            let library = try Build.cLibrary("ends-\(version.replacingOccurrences(of: ".", with: "-"))", source: """
                #include <signal.h>
                #include <stdlib.h>
                #include "sp_plugin.h"
                const sp_plugin *sp_plugin_create(const sp_host *host) { (void)host; \(body) return 0; }
                """)
            let archive = try shop.archive("e.app", version, library: library)
            let r = try sv.cli("install", shop.dir + "/" + archive)
            #expect(r.code != 0 && r.err.contains("loadFailed: the worker for e.app \(version) ended before saying hello \(how)"), "\(r.err)")
            #expect(w.installed()["e.app"] == "1.0.0")
        }
        #expect(try sv.plugin("e.app").state == "running")
    }

    @Test("kill -9 during an install leaves the old version complete; the next start cleans up")
    func killedDuringInstall() throws {
        let w = try TestWorld()
        let shop = try Shop(w)
        try FileManager.default.createDirectory(atPath: w.home + "/plugins", withIntermediateDirectories: true)
        try w.bundle("k.app", version: "1.0.0", in: w.home + "/plugins")
        let slow = try shop.archive("k.app", "2.0.0")
        let sv = try start(w, config: try shop.config(lowSpeed: 60))
        let installing = Process()
        installing.executableURL = URL(fileURLWithPath: Build.supervisor)
        installing.arguments = ["install", "--socket", sv.socket, shop.server.base + "/trickle/" + slow]
        installing.standardError = FileHandle.nullDevice
        installing.standardOutput = FileHandle.nullDevice
        try installing.run()
        try sv.waitUntil("the download to begin") {
            ((try? FileManager.default.contentsOfDirectory(atPath: w.home + "/staging")) ?? []).isEmpty == false
        }
        kill(sv.pid, SIGKILL)
        _ = try sv.waitForExit()
        installing.waitUntilExit()
        #expect(w.installed()["k.app"] == "1.0.0")
        let again = try start(w, config: try shop.config())
        #expect(try again.plugin("k.app").version == "1.0.0")
        #expect(try again.plugin("k.app").state == "running")
        #expect((try FileManager.default.contentsOfDirectory(atPath: w.home + "/staging")).isEmpty)
    }

    @Test("a supervisor stopped while an install downloads, then while an update does, answers each before it closes, naming what was not done; nothing is installed and the next start finds nothing staged")
    func stoppedDuringDownloads() throws {
        let w = try TestWorld()
        let shop = try Shop(w)
        try FileManager.default.createDirectory(atPath: w.home + "/plugins", withIntermediateDirectories: true)
        try w.bundle("s.app", version: "1.0.0", in: w.home + "/plugins")
        let newer = try shop.archive("s.app", "2.0.0")
        // The update's archive trickles (one byte a second): the catalog lists it under that route.
        try shop.offer("s.app", "2.0.0", archive: "trickle/" + newer, signature: try shop.publisher.sign(shop.dir + "/" + newer),
                       sha256: try shop.sha256(newer))
        for (request, path, said) in [(["install", shop.server.base + "/hang"], "/hang",
                                       "the supervisor stopped before the install of \(shop.server.base)/hang ended (nothing changed)"),
                                      (["update"], "/trickle/" + newer, "the supervisor stopped before the update ended (nothing changed)")] {
            let sv = try start(w, config: try shop.config(lowSpeed: 60))
            let client = Process()
            client.executableURL = URL(fileURLWithPath: Build.supervisor)
            client.arguments = [request[0], "--socket", sv.socket] + request.dropFirst()
            let err = Pipe()
            client.standardError = err
            client.standardOutput = FileHandle.nullDevice
            try client.run()
            let before = try shop.server.count(path)
            try sv.waitUntil("the download of \(path) to begin") { try shop.server.count(path) > before }
            let stopped = try sv.cli("stop")
            #expect(stopped.code == 0, "\(stopped.err)")
            _ = try sv.waitForExit()
            client.waitUntilExit()
            let text = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            // Answered (not "closed the connection without answering", exit 2), naming what was not done.
            #expect(client.terminationStatus != 0 && client.terminationStatus != 2, "\(request[0]): exit \(client.terminationStatus)")
            #expect(text.contains(said), "\(text)")
            #expect(w.installed() == ["s.app": "1.0.0"])
        }
        let again = try start(w, config: try shop.config(updates: false))
        #expect(try again.plugin("s.app").version == "1.0.0")
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: w.home + "/staging")) ?? []).isEmpty)
    }

    @Test("install with no supervisor running puts the plugin in the home; the next start runs it")
    func offlineInstall() throws {
        let w = try TestWorld()
        let shop = try Shop(w)
        let archive = try shop.archive("off.app", "1.0.0")
        let r = try Shell.run(Build.supervisor, ["install", "--home", w.home, "--config", try shop.config(), shop.dir + "/" + archive])
        #expect(r.code == 0, "\(r.err)")
        #expect(r.err.contains("no supervisor is running"))
        #expect(w.installed()["off.app"] == "1.0.0")
        let sv = try RunningSupervisor(w, args: ["--plugins", w.home + "/plugins"])
        #expect(try sv.call("off.app", "echo", "1", as: Int.self) == 1)
    }

    @Test("the installer confines itself before it reads an archive: it reads only what the install needs, writes only its staging folder, and the kernel's attack surface is refused")
    func installerSandbox() throws {
        let w = try TestWorld()
        let secret = w.root + "/elsewhere/secret"
        try FileManager.default.createDirectory(atPath: w.root + "/elsewhere", withIntermediateDirectories: true)
        try "secret".write(toFile: secret, atomically: true, encoding: .utf8)
        try FileManager.default.createDirectory(atPath: w.home + "/plugins/some.app", withIntermediateDirectories: true)
        let installed = w.home + "/plugins/some.app/plugin.json"
        try "{}".write(toFile: installed, atomically: true, encoding: .utf8)
        try FileManager.default.createDirectory(atPath: w.home + "/staging", withIntermediateDirectories: true)
        let staged = w.home + "/staging/probe"
        try "x".write(toFile: staged, atomically: true, encoding: .utf8)
        var request = InstallRequest(operation: .probe, home: w.home, lowSpeedSeconds: 5, maxBytes: 1 << 20)
        request.paths = [secret, installed, staged, "/etc/shadow", "/usr/lib/os-release"]
        let json = String(decoding: try ProtocolJSON.encode(request), as: UTF8.self)
        let r = try Shell.run(Build.dir + "/supervisor-installer", [], env: ["SP_INSTALL_REQUEST": json, "PATH": "/usr/bin:/bin"])
        #expect(r.code == 0, "\(r.err)")
        let lines = try r.out.split(separator: "\n").map { try ProtocolJSON.decode(InstallerLine.self, from: Array($0.utf8)) }
        let layers = try #require(lines.first?.sandbox)
        #expect(layers.contains("landlock") && layers.contains("seccomp") && layers.contains("noNewPrivs"), "\(layers)")
        let probed = try #require(lines.last?.probed)
        let access = Dictionary(uniqueKeysWithValues: probed.paths.map { ($0.path, $0) })
        #expect(access[secret]?.read == EACCES, "a file outside the install's paths")
        #expect(access["/etc/shadow"]?.read == EACCES)
        #expect(access[installed]?.read == 0 && access[installed]?.write == EACCES, "installed bundles: read-only")
        #expect(access[staged]?.read == 0 && access[staged]?.write == 0, "its staging folder")
        #expect(access["/usr/lib/os-release"]?.read == 0, "the system's libraries and files")
        #expect(probed.chroot == EPERM)
    }
}

@Suite(.serialized, .timeLimit(.minutes(2)))
struct RescanTests {
    @Test("SIGHUP applies a bundle changed on disk and leaves unrelated plugins alone")
    func sighupAppliesChanges() throws {
        let w = try TestWorld()
        try w.bundle("hup.changing")
        try w.bundle("hup.unrelated")
        let sv = try RunningSupervisor(w)
        let unrelated = try sv.plugin("hup.unrelated").pid
        let before = try sv.plugin("hup.changing").pid
        try w.bundle("hup.changing", version: "1.1.0")
        sv.signal(SIGHUP)
        try sv.waitUntil("the new version running") {
            let p = try sv.plugin("hup.changing")
            return p.version == "1.1.0" && p.state == "running" && p.pid != before
        }
        #expect(try sv.plugin("hup.unrelated").pid == unrelated)
        #expect(try sv.info("hup.changing").names.contains("launch"))
        let current = try sv.plugin("hup.changing").pid
        sv.signal(SIGHUP)  // nothing changed: nothing restarts
        try sv.waitUntil("the second rescan") { sv.log.components(separatedBy: "rescanned plugin folders:").count == 3 }
        #expect(sv.log.contains("rescanned plugin folders: 0 new, 0 changed, 0 removed"))
        #expect(try sv.plugin("hup.changing").restarts == 1)
        #expect(try sv.plugin("hup.changing").pid == current)
        #expect(try sv.plugin("hup.unrelated").pid == unrelated)
    }

    @Test("a reload's answer counts what the rescan left: a removed plugin has stopped, a refused one has failed, by then")
    func aReloadAnswersOnceItsStopsAreDone() throws {
        let w = try TestWorld()
        let gone = try w.bundle("hup.gone")
        try w.bundle("hup.stays")
        let broken = try w.bundle("hup.broken")
        let sv = try RunningSupervisor(w)
        try FileManager.default.removeItem(atPath: gone)
        // Not running now and refused as it is: it fails. (Running, it would go on: a test above.)
        _ = try sv.cli("call", "hup.broken", "crash", #"{"how":"exit0"}"#)
        try sv.waitUntil("hup.broken to stop") { try sv.plugin("hup.broken").state == "stopped" }
        try #"{"identifier":"hup.broken","version":"1.x","library":"libTestKit.so"}"#.write(toFile: broken + "/plugin.json", atomically: true, encoding: .utf8)
        let r = try sv.cli("reload")
        #expect(r.code == 0, "\(r.err)")
        struct Answer: Decodable { var new: Int; var changed: Int; var removed: Int; var running: Int; var failed: Int }
        let answer = try JSONDecoder().decode(Answer.self, from: Data(r.out.utf8))
        #expect(answer.removed == 1 && answer.changed == 1 && answer.running == 1 && answer.failed == 1, "\(r.out)")
    }

    @Test("a plugin restarting over and over holds no reload back: one that changes nothing is answered at once; one that adds a plugin slow to start is answered once that runs")
    func aCrashLoopHoldsNoReloadBack() throws {
        let w = try TestWorld()
        let looping = try w.bundle("hup.loop", extra: ["restart": "always"])
        try "".write(toFile: looping + "/fail-startup", atomically: true, encoding: .utf8)
        try w.bundle("hup.stays")
        // Its deadline (startupTimeoutMs + 5 s) is what a reload held back would wait for.
        let sv = try RunningSupervisor(w, args: ["--config", try w.config(#"{"restartLimit": 1000000, "restartBackoffBaseMs": 100, "restartBackoffMaxMs": 100, "startupTimeoutMs": 10000}"#)])
        try sv.waitUntil("hup.loop to restart a few times") { try sv.plugin("hup.loop").restarts >= 3 }
        struct Answer: Decodable { var new: Int; var changed: Int; var removed: Int; var running: Int; var failed: Int }
        var began = Date()
        let unchanged = try sv.cli("reload")
        #expect(unchanged.code == 0, "\(unchanged.err)")
        #expect(Date().timeIntervalSince(began) < 5, "a reload that changed nothing took \(Date().timeIntervalSince(began)) s")
        let slow = try w.bundle("hup.slow")
        try "1500".write(toFile: slow + "/startup-delay-ms", atomically: true, encoding: .utf8)
        began = Date()
        let r = try sv.cli("reload")
        let took = Date().timeIntervalSince(began)
        #expect(r.code == 0, "\(r.err)")
        let answer = try JSONDecoder().decode(Answer.self, from: Data(r.out.utf8))
        #expect(answer.new == 1 && answer.running == 2, "\(r.out)")
        #expect(took >= 1.4 && took < 8, "a reload that added a plugin starting in 1.5 s took \(took) s")
        #expect(try sv.plugin("hup.slow").state == "running")
    }

    @Test("a bundle a rescan finds refused (a manifest that cannot be used) is announced failed, as one that fails to load is")
    func aBundleFoundRefusedIsAnnounced() async throws {
        let w = try TestWorld()
        try w.bundle("hup.first")
        let sv = try RunningSupervisor(w)
        let client = try await SupervisorClient.connect(socket: sv.socket)
        defer { client.close() }
        var events = try await client.followEvents(plugin: "hup.bad").makeAsyncIterator()
        let bad = w.plugins + "/hup.bad"
        try FileManager.default.createDirectory(atPath: bad, withIntermediateDirectories: true)
        try #"{"identifier":"hup.bad","version":"1.x","library":"libTestKit.so"}"#.write(toFile: bad + "/plugin.json", atomically: true, encoding: .utf8)
        #expect(try sv.cli("reload").code == 0)
        let failed = try await nextEvent(&events, "failed") { $0.event == .failed }
        #expect(failed.plugin == "hup.bad" && (failed.lastError ?? "").contains("semantic version"), "\(failed)")
    }

    @Test("a rescan never takes a running plugin away: a duplicate dropped in is ignored, a plugin.json cut short keeps the worker, and its repair restarts nothing")
    func aRescanKeepsWhatRuns() throws {
        let w = try TestWorld()
        let bundle = try w.bundle("hup.keep", folder: "zzz")
        let sv = try RunningSupervisor(w)
        let pid = try sv.plugin("hup.keep").pid
        // A bundle of the same identifier that sorts first, and an older version.
        try w.bundle("hup.keep", version: "0.0.1", folder: "aaa")
        #expect(try sv.cli("reload").code == 0)
        #expect(sv.log.contains("/aaa/plugin.json: field 'identifier': duplicate identifier hup.keep"))
        #expect(try sv.plugin("hup.keep").pid == pid && sv.plugin("hup.keep").version == "1.0.0")
        // Its own plugin.json cut short by a save under way.
        let manifest = bundle + "/plugin.json"
        let whole = try String(contentsOfFile: manifest, encoding: .utf8)
        try String(whole.prefix(20)).write(toFile: manifest, atomically: true, encoding: .utf8)
        #expect(try sv.cli("reload").code == 0)
        let kept = try sv.plugin("hup.keep")
        #expect(kept.state == "running" && kept.pid == pid)
        #expect(kept.error?.contains("not valid JSON") == true, "\(kept.error ?? "no error")")
        #expect(try sv.cli("call", "hup.keep", "ping").code == 0)
        // Put back as it was: the reason goes, the worker stays.
        try whole.write(toFile: manifest, atomically: true, encoding: .utf8)
        #expect(try sv.cli("reload").code == 0)
        let repaired = try sv.plugin("hup.keep")
        #expect(repaired.state == "running" && repaired.pid == pid && repaired.error == nil, "\(repaired.error ?? "")")
        // Its plugin.json a symbolic link to nothing (a link swap caught half-way): kept, the reason shown.
        try FileManager.default.moveItem(atPath: manifest, toPath: manifest + ".saved")
        try FileManager.default.createSymbolicLink(atPath: manifest, withDestinationPath: bundle + "/plugin.json.next")
        #expect(try sv.cli("reload").code == 0)
        let linked = try sv.plugin("hup.keep")
        #expect(linked.state == "running" && linked.pid == pid && linked.error?.contains("plugin.json") == true, "\(linked.error ?? "no error")")
        try FileManager.default.removeItem(atPath: manifest)
        try FileManager.default.moveItem(atPath: manifest + ".saved", toPath: manifest)
        #expect(try sv.cli("reload").code == 0)
        #expect(try sv.plugin("hup.keep").restarts == 0)
    }
}

