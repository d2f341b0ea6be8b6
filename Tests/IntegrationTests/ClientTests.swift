import CLinuxSupport
import Foundation
import IPC
import PluginProtocol
import Protocol
import Synchronization
import SupervisorClient
import Testing

/// `SupervisorClient` (SPEC §12, docs/host.md) against a real `supervisor start` and TestKit
/// plugins, and `supervisor events`.
@Suite(.serialized, .timeLimit(.minutes(3)))
struct ClientTests {
    struct CallParams<P: Encodable & Sendable>: Encodable, Sendable {
        var target: String
        var method: String
        var params: P?
    }

    static func code<T>(_ body: () async throws -> T) async -> String? {
        do {
            _ = try await body()
            return nil
        } catch {
            return (error as? ErrorBody)?.code ?? "\(error)"
        }
    }

    @Test("a client calls, opens, sends and reads status over the control socket, 64 calls in flight on one connection; a cancelled task cancels its call in the plugin")
    func calls() async throws {
        let w = try TestWorld()
        try w.bundle("c.a")
        try w.bundle("c.b", deps: [Dep("c.a")])
        let sup = try RunningSupervisor(w)
        let client = try await SupervisorClient.connect(socket: sup.socket)
        defer { client.close() }
        #expect(try await client.call("c.a", "ping", as: Int.self) == 1)
        #expect(try await client.call("c.b", "echo", ["x": 1], as: [String: Int].self) == ["x": 1])
        #expect(try await client.call("c.b", "call", CallParams<Int>(target: "c.a", method: "ping"), as: Int.self) == 1)
        #expect(await Self.code { try await client.call("c.nope", "ping", as: String.self) } == "notFound")
        #expect(await Self.code { try await client.call("c.a", "fail", as: String.self) } == "custom")
        let status = try await client.status()
        #expect(status.map(\.identifier) == ["c.a", "c.b"])
        #expect(status.allSatisfy { $0.state == "running" && $0.pid != nil })
        #expect(try await client.send(.memoryWarning, to: "c.a").delivered == ["c.a"])
        #expect(try await client.open("plugin://c.a/echo?q=1", as: [String: String].self) == ["q": "1"])
        // Many at once on the one connection, each answered with its own result.
        let echoed = try await withThrowingTaskGroup(of: Int.self) { group in
            for i in 0..<64 { group.addTask { try await client.call("c.a", "echo", i, as: Int.self) } }
            return try await group.reduce(into: [Int]()) { $0.append($1) }
        }
        #expect(echoed.sorted() == Array(0..<64))
        // A cancelled task: the plugin gets `cancel` (TestKit records it); the connection goes on.
        let slow = Task { try await client.call("c.a", "sleep", ["ms": 20_000], as: Int.self, timeout: .seconds(30)) }
        try await waitUntil("the sleep to start") { try await client.call("c.a", "info", as: KitInfo.self).names.contains("sleeping:20000") }
        slow.cancel()
        await #expect(throws: CancellationError.self) { try await slow.value }
        try await waitUntil("the plugin to hear cancel") { try await client.call("c.a", "info", as: KitInfo.self).names.contains("cancelled:20000") }
        #expect(try await client.call("c.a", "ping", as: Int.self) == 1)
    }

    @Test("events: a client hears a crash as exited, restarting, started; `supervisor events --json` prints the same, one object a line, and --plugin keeps one plugin's")
    func events() async throws {
        let w = try TestWorld()
        try w.bundle("c.crashy")
        try w.bundle("c.calm")
        let sup = try RunningSupervisor(w)
        let client = try await SupervisorClient.connect(socket: sup.socket)
        defer { client.close() }
        var events = try await client.followEvents(plugin: "c.crashy").makeAsyncIterator()
        var all = try await client.followEvents().makeAsyncIterator()
        // The CLI, following every plugin's events in JSON, and only c.calm's as text.
        let jsonOut = w.root + "/events.json", textOut = w.root + "/events.txt"
        let cli = try Self.follow(sup, ["--json"], to: jsonOut)
        let calmOnly = try Self.follow(sup, ["--plugin", "c.calm"], to: textOut)
        defer { cli.terminate(); calmOnly.terminate() }
        try await waitUntil("the CLI to follow") { try await Self.followers(client) >= 4 }
        let pid = try #require(try await client.status().first { $0.identifier == "c.crashy" }?.pid)
        kill(pid, SIGSEGV)
        let exited = try await nextEvent(&events, "exited") { $0.event == .exited }
        #expect(exited.pid == pid && exited.lastExit?.signal == "SIGSEGV" && exited.plugin == "c.crashy")
        #expect(try await nextEvent(&events, "restarting") { $0.event == .restarting }.attempt == 1)
        let started = try await nextEvent(&events, "started") { $0.event == .started }
        #expect(started.pid != nil && started.pid != pid)
        _ = try await nextEvent(&all, "started (every plugin's stream)") { $0.event == .started && $0.plugin == "c.crashy" }
        try await waitUntil("the CLI's lines") {
            let lines = ((try? String(contentsOfFile: jsonOut, encoding: .utf8)) ?? "").split(separator: "\n")
            return lines.contains { $0.contains("\"event\":\"started\"") && $0.contains("c.crashy") }
        }
        let lines = try String(contentsOfFile: jsonOut, encoding: .utf8).split(separator: "\n")
        let decoded = try lines.map { try JSONDecoder().decode(HostEvent.self, from: Data($0.utf8)) }
        #expect(decoded.map(\.event) == [.exited, .restarting, .started])
        #expect(decoded[0].pid == pid && decoded[0].lastExit?.signal == "SIGSEGV")
        // c.calm's follower heard nothing of c.crashy; a restart of c.calm it hears.
        _ = try await client.restart("c.calm")
        try await waitUntil("c.calm's restart in the text follower") {
            ((try? String(contentsOfFile: textOut, encoding: .utf8)) ?? "").contains("started  c.calm")
        }
        #expect(try !String(contentsOfFile: textOut, encoding: .utf8).contains("c.crashy"))
    }

    @Test("events --plugin with a name no plugin has says so on stderr and goes on following")
    func eventsOfAnUnknownPlugin() throws {
        let w = try TestWorld()
        try w.bundle("c.known")
        let sup = try RunningSupervisor(w)
        let errFile = w.root + "/events.err"
        let process = try Self.follow(sup, ["--plugin", "c.typo"], to: w.root + "/events.out", errors: errFile)
        defer { process.terminate() }
        try sup.waitUntil("the note on stderr") {
            ((try? String(contentsOfFile: errFile, encoding: .utf8)) ?? "").contains("no plugin c.typo is installed now; following its events as they come")
        }
        #expect(process.isRunning)
    }

    /// `supervisor events` with `args`, its output into `file` (and its stderr into `errors`).
    static func follow(_ sup: RunningSupervisor, _ args: [String], to file: String, errors: String? = nil) throws -> Process {
        _ = FileManager.default.createFile(atPath: file, contents: nil)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Build.supervisor)
        process.arguments = ["events", "--socket", sup.socket] + args
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: file))
        if let errors {
            _ = FileManager.default.createFile(atPath: errors, contents: nil)
            process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: errors))
        } else {
            process.standardError = FileHandle.nullDevice
        }
        try process.run()
        return process
    }

    /// How many follow events now (`supervisor_host_event_listeners`).
    static func followers(_ client: SupervisorClient) async throws -> Int {
        let text = try await client.callMetrics()
        for line in text.split(separator: "\n") where line.hasPrefix("supervisor_host_event_listeners ") {
            return Int(Double(line.split(separator: " ").last ?? "0") ?? 0)
        }
        return 0
    }

    @Test("host methods from a client: a plugin's @host call gets its answer; denied without the permission, notFound with no provider, pluginError when it throws, timeout (the client hears cancel) when it never answers; the newest provider wins, and its going away fails its call in flight at once and falls back")
    func hostMethods() async throws {
        let w = try TestWorld()
        try w.bundle("c.allowed", extra: ["permissions": ["host.call:greet", "host.call:fail", "host.call:hang", "host.call:missing"]])
        try w.bundle("c.none")
        let sup = try RunningSupervisor(w, args: ["--config", try Self.config(w, callTimeoutMs: 1_000)])
        let first = try await SupervisorClient.connect(socket: sup.socket)
        defer { first.close() }
        struct Name: Codable, Sendable { var name: String }
        struct Broken: Error {}
        let cancelled = Atomic<Int>(0)
        first.method("greet") { (p: Name) in "hello \(p.name)" }
        first.method("fail") { (_: String?) -> String in throw Broken() }
        first.method("hang") { (_: String?) -> String in
            do { try await Task.sleep(for: .seconds(60)) } catch { cancelled.add(1, ordering: .relaxed) }
            return "late"
        }
        func viaPlugin<P: Encodable & Sendable>(_ plugin: String, _ method: String, _ params: P?) async throws -> String {
            try await first.call(plugin, "callHost", CallParams(target: "@host", method: method, params: params), as: String.self, timeout: .seconds(10))
        }
        #expect(try await viaPlugin("c.allowed", "greet", Name(name: "Ada")) == "hello Ada")
        #expect(await Self.code { try await viaPlugin("c.none", "greet", Name(name: "x")) } == "denied")
        #expect(await Self.code { try await viaPlugin("c.allowed", "missing", String?.none) } == "notFound")
        #expect(await Self.code { try await viaPlugin("c.allowed", "fail", String?.none) } == "pluginError")
        #expect(await Self.code { try await viaPlugin("c.allowed", "hang", String?.none) } == "timeout")
        try await waitUntil("the client to hear cancel") { cancelled.load(ordering: .relaxed) == 1 }

        // A second client provides greet too: it gets the calls; when it goes, the first does again.
        let second = try await SupervisorClient.connect(socket: sup.socket)
        second.method("greet") { (p: Name) in "bonjour \(p.name)" }
        // Its `provide` is read before anything it asks afterwards.
        _ = try await second.status()
        #expect(try await viaPlugin("c.allowed", "greet", Name(name: "Bo")) == "bonjour Bo")
        let waiting = Atomic<Int>(0)
        second.method("hang") { (_: String?) -> String in
            waiting.add(1, ordering: .relaxed)
            try await Task.sleep(for: .seconds(60))
            return "late"
        }
        _ = try await second.status()
        let inFlight = Task { await Self.code { try await viaPlugin("c.allowed", "hang", String?.none) } }
        try await waitUntil("the second client to get the call") { waiting.load(ordering: .relaxed) == 1 }
        let closedAt = ContinuousClock.now
        second.close()
        #expect(await inFlight.value == "unavailable")
        #expect(ContinuousClock.now - closedAt < .milliseconds(900), "unavailable at once, not at the call's timeout")
        #expect(try await viaPlugin("c.allowed", "greet", Name(name: "Cy")) == "hello Cy")
        first.close()
        let third = try await SupervisorClient.connect(socket: sup.socket)
        defer { third.close() }
        try await waitUntil("no provider of greet") {
            await Self.code { try await third.call("c.allowed", "callHost", CallParams(target: "@host", method: "greet", params: Name(name: "x")), as: String.self) } == "notFound"
        }
    }

    /// A C plugin whose `ask` calls its host's `greet` (`target: "@host"`, as docs/abi.md shows it)
    /// and answers with the host's answer, as it came.
    static let cAsker = #"""
    #define _GNU_SOURCE
    #include <stdio.h>
    #include <stdlib.h>
    #include <string.h>
    #include "sp_plugin.h"
    static const sp_host *host;
    static unsigned long long asked_by = 0;
    static unsigned long long id_of(const char *json, size_t len) {
        const char *p = memmem(json, len, "\"id\":", 5);
        return p ? strtoull(p + 5, NULL, 10) : 0;
    }
    static void say(const char *frame, int n) { host->send(host->ctx, (const uint8_t *)frame, (size_t)n); }
    static void receive(void *ctx, const uint8_t *bytes, size_t len) {
        (void)ctx;
        const char *json = (const char *)bytes;
        unsigned long long id = id_of(json, len);
        char frame[512];
        if (memmem(json, len, "\"type\":\"reply\"", 14) && id == 1000000) {
            const char *member = memmem(json, len, "\"result\":", 9);
            if (!member) member = memmem(json, len, "\"error\":", 8);
            int rest = (int)(json + len - member) - 1;
            int n = snprintf(frame, sizeof frame, "{\"type\":\"reply\",\"id\":%llu,%.*s}", asked_by, rest, member);
            say(frame, n);
        } else if (memmem(json, len, "\"type\":\"call\"", 13)) {
            asked_by = id;
            int n = snprintf(frame, sizeof frame, "{\"type\":\"call\",\"id\":1000000,\"target\":\"@host\",\"method\":\"greet\",\"params\":\"C\",\"timeoutMs\":5000}");
            say(frame, n);
        } else if (memmem(json, len, "\"type\":\"event\"", 14)) {
            int n = snprintf(frame, sizeof frame, "{\"type\":\"reply\",\"id\":%llu,\"result\":null}", id);
            say(frame, n);
        }
    }
    static void destroy(void *ctx) { (void)ctx; }
    static const sp_plugin plugin = { SP_ABI_VERSION, NULL, receive, destroy };
    const sp_plugin *sp_plugin_create(const sp_host *h) { host = h; return &plugin; }
    """#

    @Test("a C plugin calls a method a client provides, with the message docs/abi.md shows")
    func cPluginCallsTheClient() async throws {
        let w = try TestWorld()
        try w.bundle("c.asker", library: try Build.cLibrary("casker", source: Self.cAsker), extra: ["permissions": ["host.call:greet"]])
        let sup = try RunningSupervisor(w)
        let client = try await SupervisorClient.connect(socket: sup.socket)
        defer { client.close() }
        #expect(await Self.code { try await client.call("c.asker", "ask", as: String.self) } == "notFound")
        client.method("greet") { (who: String) in "hello \(who)" }
        #expect(try await client.call("c.asker", "ask", as: String.self) == "hello C")
    }

    @Test("a client outlives a supervisor's restart: a call made while none runs waits for the next one, and the methods it provided are provided again")
    func reconnects() async throws {
        let w = try TestWorld()
        try w.bundle("c.r", extra: ["permissions": ["host.call:greet"]])
        var sup = try RunningSupervisor(w)
        let client = try await SupervisorClient.connect(socket: sup.socket, wait: .seconds(20))
        defer { client.close() }
        client.method("greet") { (p: String) in "hello \(p)" }
        #expect(try await client.call("c.r", "ping", as: Int.self) == 1)
        _ = try sup.cli("stop")
        let stopping = sup
        try await waitUntil("the supervisor to stop") { !stopping.process.isRunning }
        let waiting = Task { try await client.call("c.r", "ping", as: Int.self, timeout: .seconds(20)) }
        sup = try RunningSupervisor(w)
        #expect(try await waiting.value == 1)
        try await waitUntil("greet to be provided again") {
            (try? await client.call("c.r", "callHost", CallParams(target: "@host", method: "greet", params: "Ada"), as: String.self)) == "hello Ada"
        }
        _ = sup
    }

    @Test("a client sending garbage is dropped alone and counted; 1,000 clients that connect and vanish mid-call leave the supervisor's descriptors and memory where they were")
    func badClients() async throws {
        let w = try TestWorld()
        try w.bundle("c.g")
        let sup = try RunningSupervisor(w)
        let client = try await SupervisorClient.connect(socket: sup.socket)
        defer { client.close() }
        #expect(try await client.call("c.g", "ping", as: Int.self) == 1)
        let garbage = try rawControl(sup.socket)
        try garbage.sendFrame([UInt8].frame(body: Array("this is not json".utf8)))
        let last = try #require(try garbage.receiveFrame())
        #expect(String(decoding: last, as: UTF8.self).contains("protocolViolation"))
        #expect(try garbage.receiveFrame() == nil)
        garbage.close()
        #expect(try await client.call("c.g", "ping", as: Int.self) == 1)
        #expect(try await client.callMetrics().contains(#"supervisor_control_clients_dropped_total{reason="protocolViolation"} 1"#))

        // Its direct link holds a descriptor in the supervisor: made before the count.
        try await waitUntil("the client's link to c.g") { _ = try await client.call("c.g", "ping", as: Int.self); return client.linkedPlugins == ["c.g"] }
        let fds = try openFDs(sup.pid), memory = try rss(sup.pid)
        for i in 0..<1_000 {
            let vanishing = try rawControl(sup.socket)
            try vanishing.sendFrame(callFrame(id: 1, target: "c.g", method: "sleep", params: #"{"ms":\#(5_000 + i)}"#))
            vanishing.close()
        }
        try await waitUntil("the vanished clients' descriptors to be closed", within: 30) { try openFDs(sup.pid) <= fds }
        #expect(try rss(sup.pid) - memory < 16 << 20)
        #expect(try await client.call("c.g", "ping", as: Int.self) == 1)
    }

    @Test("one hop: after its first call a client's calls go over a direct link to the worker (answered while the supervisor's loop is held), counted in the supervisor's metrics; a call that times out on the link is cancelled in the plugin")
    func directLink() async throws {
        let w = try TestWorld()
        try w.bundle("c.d")
        let sup = try RunningSupervisor(w)
        let client = try await SupervisorClient.connect(socket: sup.socket)
        defer { client.close() }
        #expect(try await client.call("c.d", "ping", as: Int.self) == 1)
        try await waitUntil("the direct link") { client.linkedPlugins == ["c.d"] }
        // The supervisor's loop held for 1.5 s: a call over the link does not notice.
        try holdLoop(sup.socket, milliseconds: 1_500)
        let started = ContinuousClock.now
        #expect(try await client.call("c.d", "echo", "past the supervisor", as: String.self) == "past the supervisor")
        #expect(ContinuousClock.now - started < .milliseconds(1_000), "answered over the link while the supervisor's loop was held")
        for _ in 0..<100 { _ = try await client.call("c.d", "ping", as: Int.self) }
        #expect(await Self.code { try await client.call("c.d", "fail", as: String.self) } == "custom")
        // Counted as if forwarded by the supervisor (the link reports at most a second later).
        try await waitUntil("the link's counts in the metrics") {
            let text = try await client.callMetrics()
            return text.contains(#"plugin_calls_total{plugin="c.d",outcome="ok"} 102"#) && text.contains(#"plugin_calls_total{plugin="c.d",outcome="error"} 1"#)
        }
        #expect(await Self.code { try await client.call("c.d", "sleep", ["ms": 5_000], as: Int.self, timeout: .milliseconds(300)) } == "timeout")
        try await waitUntil("the plugin to hear cancel") { try await client.call("c.d", "info", as: KitInfo.self).names.contains("cancelled:5000") }
        #expect(client.linkedPlugins == ["c.d"])
    }

    @Test("a short timeout on a direct link is kept to within a few milliseconds, though the link's thread was asleep until its next report")
    func directLinkTimeoutsOnTime() async throws {
        let w = try TestWorld()
        try w.bundle("c.t")
        let sup = try RunningSupervisor(w)
        let client = try await SupervisorClient.connect(socket: sup.socket)
        defer { client.close() }
        #expect(try await client.call("c.t", "ping", as: Int.self) == 1)
        try await waitUntil("the direct link") { client.linkedPlugins == ["c.t"] }
        var took: [Duration] = []
        for _ in 0..<5 {
            let started = ContinuousClock.now
            #expect(await Self.code { try await client.call("c.t", "sleep", ["ms": 5_000], as: Int.self, timeout: .milliseconds(100)) } == "timeout")
            took.append(ContinuousClock.now - started)
        }
        // The link's thread sleeps up to a second between reports when no call is due earlier.
        #expect(took.allSatisfy { $0 < .milliseconds(600) }, "timeouts of 100 ms ended after \(took)")
        #expect(client.linkedPlugins == ["c.t"])
    }

    @Test("calls in flight on a direct link when the supervisor is killed (its workers with it) fail unavailable with started, each by its own timeout")
    func supervisorKilledUnderLinkedCalls() async throws {
        let w = try TestWorld()
        try w.bundle("c.k")
        let sup = try RunningSupervisor(w)
        let client = try await SupervisorClient.connect(socket: sup.socket)
        defer { client.close() }
        #expect(try await client.call("c.k", "ping", as: Int.self) == 1)
        try await waitUntil("the direct link") { client.linkedPlugins == ["c.k"] }
        let began = ContinuousClock.now
        let calls = (0..<4).map { _ in
            Task { () -> ErrorBody? in
                do {
                    _ = try await client.call("c.k", "sleep", ["ms": 20_000], as: Int.self, timeout: .seconds(2))
                    return nil
                } catch { return error as? ErrorBody }
            }
        }
        try await waitUntil("a sleep under way") { try await client.call("c.k", "info", as: KitInfo.self).names.contains("sleeping:20000") }
        kill(sup.pid, SIGKILL)
        for call in calls {
            let error = await call.value
            #expect(error?.code == "unavailable" && error?.data?.started == true, "\(String(describing: error))")
        }
        #expect(ContinuousClock.now - began < .seconds(6), "the calls of 2 s took \(ContinuousClock.now - began)")
    }

    /// What a `link` request is answered with: the token and where to pick the link up.
    struct LinkGrantResult: Decodable { var token: String; var socket: String }

    /// Asks for a link to `target` on a raw control connection, after one call that starts it.
    func grantedLink(_ control: BlockingConnection, to target: String) throws -> LinkGrantResult {
        _ = try control.sendFrame(callFrame(id: 1, target: target, method: "ping"))
        _ = try control.receiveFrame()
        var link = FrameBuilder(kind: .link)
        link.uint("id", 2)
        link.string("target", target)
        try control.sendFrame(link.finish())
        struct Grant: Decodable { var result: LinkGrantResult }
        return try JSONDecoder().decode(Grant.self, from: Data(try #require(try control.receiveFrame()))).result
    }

    /// A direct link to `target`'s worker, asked for on `control` and picked up: its connection.
    func rawLink(_ control: BlockingConnection, to target: String) throws -> BlockingConnection {
        let granted = try grantedLink(control, to: target)
        let picked = try pickUp(granted.socket, token: granted.token)
        guard picked.fd >= 0 else { throw HarnessError("no link to \(target): \(picked.text)") }
        return BlockingConnection(fd: picked.fd)
    }

    /// Presents `token` at the link socket `socket`: the answer's text and the descriptor that came
    /// with it (-1 when none did).
    func pickUp(_ socket: String, token: String) throws -> (text: String, fd: Int32) {
        let connection = try BlockingConnection.connect(path: socket)
        defer { connection.close() }
        try connection.sendFrame(ProtocolJSON.frame(["token": token]))
        var buffer = [UInt8](repeating: 0, count: 256)
        var fd: Int32 = -1
        let n = buffer.withUnsafeMutableBytes { cls_receive_with_fd(connection.fd, $0.baseAddress, $0.count, &fd) }
        return (String(decoding: buffer[4..<max(4, n)], as: UTF8.self), fd)
    }

    @Test("clients holding the link handoff socket silent, or trickling a request a byte at a time, keep no other client waiting")
    func aSlowHandoffClientKeepsNoOtherWaiting() throws {
        let w = try TestWorld()
        try w.bundle("c.h")
        let sup = try RunningSupervisor(w)
        let path = sup.socket + ".links"
        let silent = try (0..<8).map { _ in try BlockingConnection.connect(path: path) }
        defer { silent.forEach { $0.close() } }
        // A header that announces 4,000 bytes, then a byte every 100 ms.
        let trickler = try BlockingConnection.connect(path: path)
        defer { trickler.close() }
        let header: [UInt8] = [0, 0, 0x0F, 0xA0]
        _ = header.withUnsafeBytes { send(trickler.fd, $0.baseAddress, 4, Int32(MSG_NOSIGNAL)) }
        let fd = trickler.fd
        Thread {
            for _ in 0..<30 {
                var byte: UInt8 = 0x20
                guard send(fd, &byte, 1, Int32(MSG_NOSIGNAL)) == 1 else { return }
                usleep(100_000)
            }
        }.start()
        let asked = Date()
        let other = try BlockingConnection.connect(path: path)
        defer { other.close() }
        try other.sendFrame(ProtocolJSON.frame(["token": "00000000000000000000000000000000"]))
        let answer = try #require(try other.receiveFrame())
        #expect(String(decoding: answer, as: UTF8.self).contains("unknown token"))
        #expect(Date().timeIntervalSince(asked) < 0.9, "answered \(Date().timeIntervalSince(asked)) s later")
        // The trickler is cut off at its request's one-second deadline, not a second a byte.
        #expect(try trickler.receiveFrame().map { String(decoding: $0, as: UTF8.self).contains("did not come within 1000 ms") } == true)
    }

    @Test("a link's descriptor is handed only for a token the supervisor gave, once: an unknown token gets an error and nothing else")
    func linkTokens() async throws {
        let w = try TestWorld()
        try w.bundle("c.t")
        let sup = try RunningSupervisor(w)
        let handoff = try BlockingConnection.connect(path: sup.socket + ".links")
        try handoff.sendFrame(ProtocolJSON.frame(["token": "00000000000000000000000000000000"]))
        let answer = try #require(try handoff.receiveFrame())
        #expect(String(decoding: answer, as: UTF8.self).contains("unknown token"))
        #expect(try handoff.receiveFrame() == nil)
        handoff.close()
        // Asked on the control socket, a token works once.
        let control = try rawControl(sup.socket)
        let granted = try grantedLink(control, to: "c.t")
        let first = try pickUp(granted.socket, token: granted.token)
        #expect(first.fd >= 0 && first.text.contains("\"link\""), "\(first.text)")
        let second = try pickUp(granted.socket, token: granted.token)
        #expect(second.fd == -1 && second.text.contains("unknown token"), "\(second.text)")
        for fd in [first.fd, second.fd] where fd >= 0 { close(fd) }
        control.close()
    }

    @Test("a peer of another uid is refused at the link socket, even with a token the supervisor gave, and the token stays good for its own user",
          .enabled(if: geteuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv"), "needs root and setpriv to run a client as another user"))
    func linkSocketRefusesOtherUsers() async throws {
        let w = try TestWorld()
        try w.bundle("c.u")
        let sup = try RunningSupervisor(w)
        let control = try rawControl(sup.socket)
        let granted = try grantedLink(control, to: "c.u")
        // The socket is 0600 (another user cannot even connect); opened up here, so that the
        // supervisor's own check of the peer's credentials is what refuses.
        #expect(granted.socket.hasPrefix(w.home + "/"))
        for folder in [w.root, w.home] { chmod(folder, 0o755) }
        chmod(granted.socket, 0o666)
        let script = """
            import socket, struct, sys
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(sys.argv[1])
            body = ('{"token":"%s"}' % sys.argv[2]).encode()
            try:
                s.sendall(struct.pack(">I", len(body)) + body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # refused on its credentials before its request was read: the answer is already here
            head = s.recv(4)
            print(s.recv(struct.unpack(">I", head)[0]).decode() if len(head) == 4 else "nothing")
            """
        let other = try Shell.run("/usr/bin/setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", script, granted.socket, granted.token])
        #expect(other.code == 0 && other.out.contains("only the supervisor's own user may take a link"), "\(other.out) \(other.err)")
        // Refused before its request was read: the token is still good, once, for the supervisor's user.
        let mine = try pickUp(granted.socket, token: granted.token)
        #expect(mine.fd >= 0 && mine.text.contains("\"link\""), "\(mine.text)")
        if mine.fd >= 0 { close(mine.fd) }
        control.close()
    }

    @Test("hostile clients of the new requests: link and provide without what they need, a reply to a call never sent, linkCalls malformed or for no link, a token frame that is too large or not JSON: each gets a clear error, the bad ones are dropped and counted, and the supervisor serves on")
    func hostileRequests() async throws {
        let w = try TestWorld()
        try w.bundle("c.h")
        let sup = try RunningSupervisor(w)
        func ask(_ connection: BlockingConnection, _ kind: MessageKind, _ fill: (inout FrameBuilder) -> Void = { _ in }) throws -> String {
            var frame = FrameBuilder(kind: kind)
            frame.uint("id", 5)
            fill(&frame)
            try connection.sendFrame(frame.finish())
            return String(decoding: try #require(try connection.receiveFrame()), as: UTF8.self)
        }
        let polite = try rawControl(sup.socket)
        #expect(try ask(polite, .link).contains(#""code":"badRequest""#))
        #expect(try ask(polite, .link) { $0.string("target", "c.nope") }.contains(#""code":"notFound""#))
        #expect(try ask(polite, .provide).contains(#""code":"badRequest""#))
        // Dropped, each with its reason: a reply to a host call it was never sent, bad linkCalls.
        let dropped: [(String, (BlockingConnection) throws -> Void)] = [
            ("reply to id 99", { c in
                var reply = FrameBuilder(kind: .reply)
                reply.uint("id", 99)
                reply.raw("result", Array("1".utf8))
                try c.sendFrame(reply.finish())
            }),
            ("malformed linkCalls", { c in try c.sendFrame([UInt8].frame(body: Array(#"{"type":"linkCalls","target":"c.h"}"#.utf8))) }),
            ("linkCalls for c.h, to which it holds no link", { c in
                try c.sendFrame(ProtocolJSON.frame(CallHop.LinkCalls(target: "c.h", calls: CallHop.Tally())))
            }),
        ]
        for (why, send) in dropped {
            let bad = try rawControl(sup.socket)
            try send(bad)
            let last = String(decoding: try #require(try bad.receiveFrame()), as: UTF8.self)
            #expect(last.contains("protocolViolation") && last.contains(why), "\(last)")
            #expect(try bad.receiveFrame() == nil)
            bad.close()
        }
        // The link socket: a token frame over its limit, or not JSON, gets an error and nothing else.
        for (frame, said) in [([UInt8].frame(body: Array(repeating: UInt8(ascii: "x"), count: 5_000)), "a request is 4,092 bytes at most"),
                              ([UInt8].frame(body: Array("not json".utf8)), #"expected {\"token\""#)] {
            let handoff = try BlockingConnection.connect(path: sup.socket + ".links")
            try handoff.sendFrame(frame)
            var buffer = [UInt8](repeating: 0, count: 256)
            var fd: Int32 = -1
            let n = buffer.withUnsafeMutableBytes { cls_receive_with_fd(handoff.fd, $0.baseAddress, $0.count, &fd) }
            #expect(fd == -1 && n > 4 && String(decoding: buffer[4..<n], as: UTF8.self).contains(said))
            handoff.close()
        }
        #expect(try ask(polite, .call) { $0.string("target", "c.h"); $0.string("method", "ping") }.contains(#""result":1"#))
        polite.close()
        let client = try await SupervisorClient.connect(socket: sup.socket)
        defer { client.close() }
        #expect(try await client.callMetrics().contains(#"supervisor_control_clients_dropped_total{reason="protocolViolation"} 3"#))
    }

    @Test("a client's direct link to a worker that crashes: the call in flight fails unavailable, the next waits for the restart and succeeds, and a new link follows; a restart of the plugin (its worker drains) loses no call")
    func directLinkFaults() async throws {
        let w = try TestWorld()
        try w.bundle("c.f")
        let sup = try RunningSupervisor(w)
        let client = try await SupervisorClient.connect(socket: sup.socket)
        defer { client.close() }
        #expect(try await client.call("c.f", "ping", as: Int.self) == 1)
        try await waitUntil("the direct link") { client.linkedPlugins == ["c.f"] }
        let slow = Task { await Self.code { try await client.call("c.f", "sleep", ["ms": 20_000], as: Int.self, timeout: .seconds(30)) } }
        try await waitUntil("the sleep to start") { try await client.call("c.f", "info", as: KitInfo.self).names.contains("sleeping:20000") }
        let pid = try #require(try await client.status().first?.pid)
        kill(pid, SIGSEGV)
        #expect(await slow.value == "unavailable")
        // The next call waits for the restarted worker, even if the link saw the end before the
        // supervisor did (its report says so, and the supervisor looks at the process).
        #expect(try await client.call("c.f", "ping", as: Int.self) == 1)
        try await waitUntil("a new direct link") { client.linkedPlugins == ["c.f"] }
        #expect(try await client.status().first?.pid != pid)

        // Calls over the link in four lanes while the plugin is restarted: none fails.
        #expect(try await failedCalls({ try await client.call("c.f", "echo", $0, as: Int.self, timeout: .seconds(10)) }) {
            _ = try await client.restart("c.f")
        } == 0)
        try await waitUntil("a link to the new worker") { client.linkedPlugins == ["c.f"] }
    }

    @Test("a link's thread that polls for replies before it sleeps (5 ms here, 0: never; Int.max and -1 are kept to 10 ms and 0, not an overflow): calls one after another are answered either way, and a worker killed while calls flow ends the link whether its thread polls or sleeps: calls in flight fail unavailable, the next are answered and a new link follows",
          arguments: [5_000, 0, Int.max, -1])
    func linkPolling(microseconds: Int) async throws {
        let w = try TestWorld()
        try w.bundle("c.p")
        let sup = try RunningSupervisor(w)
        let client = try await SupervisorClient.connect(socket: sup.socket, linkPollMicroseconds: microseconds)
        defer { client.close() }
        #expect(client.linkPollMicroseconds == microseconds)
        #expect(try await client.call("c.p", "ping", as: Int.self) == 1)
        try await waitUntil("the direct link") { client.linkedPlugins == ["c.p"] }
        for i in 0..<300 { #expect(try await client.call("c.p", "echo", i, as: Int.self) == i) }
        // Two lanes calling back to back (the link's thread mostly polling, when it does), then the worker killed.
        let pid = try #require(try await client.status().first?.pid)
        final class Lanes: Sendable {
            let answered = Atomic<Int>(0)
            let stop = Atomic<Bool>(false)
        }
        let shared = Lanes()
        let lanes = (0..<2).map { lane in
            Task { () -> Set<String> in
                var failures: Set<String> = []
                var i = 0
                while !shared.stop.load(ordering: .relaxed) {
                    i += 1
                    let code = await Self.code { () async throws -> Int in
                        let answer = try await client.call("c.p", "echo", i, as: Int.self, timeout: .seconds(10))
                        if answer != i { throw ErrorBody(.pluginError, "lane \(lane): \(answer) for \(i)") }
                        return answer
                    }
                    if let code { failures.insert(code) } else { shared.answered.add(1, ordering: .relaxed) }
                }
                return failures
            }
        }
        try await waitUntil("calls flowing over the link") { shared.answered.load(ordering: .relaxed) >= 1_000 }
        // One call surely inside the worker when it dies (the lanes' calls may all be answered or
        // not yet sent at that instant: a fast worker leaves them little time inside it).
        let slow = Task { await Self.code { try await client.call("c.p", "sleep", ["ms": 10_000], as: Int.self, timeout: .seconds(20)) } }
        try await waitUntil("the slow call inside the worker") { try sup.info("c.p").names.contains("sleeping:10000") }
        kill(pid, SIGSEGV)
        try await waitUntil("the restarted worker") { try await client.status().first.map { $0.pid != pid && $0.state == "running" } == true }
        let before = shared.answered.load(ordering: .relaxed)
        try await waitUntil("calls answered after the restart") { shared.answered.load(ordering: .relaxed) >= before + 100 }
        shared.stop.store(true, ordering: .relaxed)
        var failures: Set<String> = []
        for lane in lanes { failures.formUnion(await lane.value) }
        // The calls in flight at the crash fail unavailable (nothing else fails, nothing answers wrong).
        #expect(await slow.value == "unavailable")
        #expect(failures.isSubset(of: ["unavailable"]))
        #expect(try await client.call("c.p", "ping", as: Int.self) == 1)
        try await waitUntil("a new direct link") { client.linkedPlugins == ["c.p"] }
        #expect(try await client.status().first?.pid != pid)
        for i in 0..<50 { #expect(try await client.call("c.p", "echo", i, as: Int.self) == i) }
    }

    @Test("answered calls stay answered over a link: the replies a worker holds back while it takes one read's calls reach the caller when the plugin crashes (or exits) on a later call of that read",
          arguments: ["segv", "exit3"])
    func heldRepliesSurviveACrash(how: String) async throws {
        let w = try TestWorld()
        try w.bundle("c.h")
        let sup = try RunningSupervisor(w)
        let control = try rawControl(sup.socket)
        defer { control.close() }
        let link = try rawLink(control, to: "c.h")
        defer { link.close() }
        // Five calls in one write, so the worker takes them in one read: three answered, then a
        // crash, then one that never runs.
        var batch: [UInt8] = []
        for id in 1...3 { batch += callFrame(id: UInt64(id), target: "c.h", method: "ping") }
        batch += callFrame(id: 4, target: "c.h", method: "crash", params: #"{"how":"\#(how)"}"#)
        batch += callFrame(id: 5, target: "c.h", method: "ping")
        try link.sendFrame(batch)
        var answered: [UInt64] = []
        while let frame = try link.receiveFrame() {
            let env = try frame.withUnsafeBytes { try Envelope.parse($0) }
            #expect(env.kind == .reply && env.error == nil, "\(String(decoding: frame, as: UTF8.self))")
            if let id = env.id { answered.append(id) }
        }
        #expect(answered == [1, 2, 3])
    }

    @Test("large calls, many at once, over a direct link: 64 tasks echo 200 KB each, four times, and every answer comes back whole over the same link (neither side waits on a full socket for the other)")
    func largeCallsInFlightOverALink() async throws {
        let w = try TestWorld()
        try w.bundle("c.l")
        let sup = try RunningSupervisor(w)
        let client = try await SupervisorClient.connect(socket: sup.socket)
        defer { client.close() }
        #expect(try await client.call("c.l", "ping", as: Int.self) == 1)
        try await waitUntil("the direct link") { client.linkedPlugins == ["c.l"] }
        let text = String(repeating: "0123456789abcdef", count: 200_000 / 16)
        let wrong = try await withThrowingTaskGroup(of: Int.self) { group in
            for lane in 0..<64 {
                group.addTask {
                    var wrong = 0
                    for round in 0..<4 {
                        let value = "\(lane).\(round)." + text
                        if try await client.call("c.l", "echo", value, as: String.self, timeout: .seconds(30)) != value { wrong += 1 }
                    }
                    return wrong
                }
            }
            return try await group.reduce(0, +)
        }
        #expect(wrong == 0)
        #expect(client.linkedPlugins == ["c.l"])
    }

    @Test("a call over a link names the link's plugin as its target (written as it is or with escapes) and has a method; any other is answered badRequest and the link serves on")
    func linkCallsNameTheirTarget() async throws {
        let w = try TestWorld()
        try w.bundle("c.n")
        let sup = try RunningSupervisor(w)
        let control = try rawControl(sup.socket)
        defer { control.close() }
        let link = try rawLink(control, to: "c.n")
        defer { link.close() }
        func ask(_ frame: [UInt8]) throws -> String {
            try link.sendFrame(frame)
            return String(decoding: try #require(try link.receiveFrame()), as: UTF8.self)
        }
        #expect(try ask(callFrame(id: 1, target: "c.other", method: "ping")).contains("badRequest"))
        #expect(try ask(callFrame(id: 2, target: "c.nn", method: "ping")).contains("badRequest"))
        #expect(try ask(Array(#"{"type":"call","id":3,"target":"c.n"}"#.utf8).framed()).contains("badRequest"))
        #expect(try ask(Array(#"{"type":"call","id":4,"target":"c.n","method":7}"#.utf8).framed()).contains("badRequest"))
        #expect(try ask(Array(#"{"type":"call","id":5,"target":"c.\u006e","method":"ping"}"#.utf8).framed()) == #"{"type":"reply","id":5,"result":1}"#)
        #expect(try ask(callFrame(id: 6, target: "c.n", method: "ping")) == #"{"type":"reply","id":6,"result":1}"#)
    }

    static func config(_ w: TestWorld, callTimeoutMs: Int) throws -> String {
        let path = w.root + "/config.json"
        try #"{"callTimeoutMs": \#(callTimeoutMs)}"#.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }
}

extension SupervisorClient {
    /// The Prometheus text, through a raw request (tests only).
    func callMetrics() async throws -> String {
        let connection = try SupervisorConnection(socketPath: socketPath)
        defer { connection.close() }
        let raw = try connection.request(.metrics)
        return try JSONDecoder().decode(String.self, from: Data(raw))
    }
}

extension Array where Element == UInt8 {
    /// This body with its length prefix: a frame.
    func framed() -> [UInt8] {
        let n = UInt32(count)
        return [UInt8(n >> 24), UInt8(n >> 16 & 0xFF), UInt8(n >> 8 & 0xFF), UInt8(n & 0xFF)] + self
    }
}
