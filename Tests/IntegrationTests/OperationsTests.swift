import Foundation
import IPC
import PluginProtocol
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// SPEC §10: systemd's notify protocol, Prometheus metrics, JSON logs, trace context.
@Suite(.serialized, .timeLimit(.minutes(3)))
struct OperationsTests {
    // MARK: systemd

    @Test("systemd: READY=1 after the ready line, WATCHDOG=1 at half of WATCHDOG_USEC, RELOADING=1/READY=1 around a reload, STOPPING=1")
    func systemdNotify() throws {
        let w = try TestWorld()
        try w.bundle("k.one")
        // Inactive until called: not "starting" in systemctl status.
        try w.bundle("k.lazy", extra: ["activation": "onCall"])
        let notify = try FakeNotifySocket(path: w.root + "/notify.sock")
        defer { notify.close() }
        let sv = try RunningSupervisor(w, environment: ["NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "200000"], waitForReady: false)
        let ready = try notify.wait("READY=1") { $0.contains("READY=1") }
        #expect(sv.stdout.contains("ready"), "READY=1 came before the ready line")
        #expect(ready.text.contains("STATUS=1 plugin running, 1 inactive until needed"), "\(ready.text)")

        // Keep-alives every 100 ms: wait for ten, then look at the gaps.
        try notify.wait("10 WATCHDOG=1", timeout: 10) { _ in notify.count { $0 == "WATCHDOG=1" } >= 10 }
        let beats = notify.received.filter { $0.text == "WATCHDOG=1" }.map(\.at)
        let gaps = zip(beats.dropFirst(), beats).map { $0.timeIntervalSince($1) }.sorted()
        let median = gaps[gaps.count / 2]
        #expect(median > 0.07 && median < 0.2, "median gap between WATCHDOG=1 was \(median) s, expected 0.1 s")

        // A reload: RELOADING=1 with the monotonic time, then READY=1 once settled.
        let before = notify.received.count
        try w.bundle("k.two")
        let r = try sv.cli("reload")
        #expect(r.code == 0, "\(r.err)")
        #expect(r.out.contains(#""new":1"#) && r.out.contains(#""running":2"#), "\(r.out)")
        // The supervisor sends READY=1 before it answers, but the fake socket's own thread reads
        // the datagrams: the answer may come first.
        try notify.wait("READY=1 after the reload") { _ in notify.received[before...].contains { $0.text.hasPrefix("READY=1") } }
        let afterReload = Array(notify.received[before...]).map(\.text).filter { $0 != "WATCHDOG=1" }
        let reloading = try #require(afterReload.firstIndex { $0.hasPrefix("RELOADING=1") }, "\(afterReload)")
        #expect(afterReload[reloading].contains("MONOTONIC_USEC="))
        let readyAgain = try #require(afterReload.lastIndex { $0.hasPrefix("READY=1") }, "\(afterReload)")
        #expect(readyAgain > reloading)
        #expect(afterReload[readyAgain].contains("STATUS=2 plugins running, 1 inactive until needed"), "\(afterReload[readyAgain])")

        // SIGHUP does the same.
        let beforeHUP = notify.received.count
        sv.signal(SIGHUP)
        try notify.wait("READY=1 after SIGHUP") { _ in
            let texts = notify.received[beforeHUP...].map(\.text)
            return texts.contains { $0.hasPrefix("RELOADING=1") } && texts.contains { $0.hasPrefix("READY=1") }
        }

        #expect(try sv.cli("stop").code == 0)
        try notify.wait("STOPPING=1") { $0.hasPrefix("STOPPING=1") }
        #expect(try sv.waitForExit() == 0)
    }

    @Test("systemd: WATCHDOG_PID of another process means no keep-alives; an unusable NOTIFY_SOCKET is ignored")
    func watchdogPID() throws {
        let w = try TestWorld()
        try w.bundle("k.one")
        let notify = try FakeNotifySocket(path: w.root + "/notify.sock")
        defer { notify.close() }
        let sv = try RunningSupervisor(w, environment: ["NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "100000", "WATCHDOG_PID": "1"], waitForReady: false)
        try notify.wait("READY=1") { $0.contains("READY=1") }
        // Its own status line follows within a second if anything changed; keep-alives would have
        // come ten times by the time a call round-trips twice at this rate: wait for a later message.
        _ = try sv.cli("call", "k.one", "ping")
        #expect(try sv.cli("stop").code == 0)
        try notify.wait("STOPPING=1") { $0.hasPrefix("STOPPING=1") }
        #expect(notify.count { $0 == "WATCHDOG=1" } == 0, "WATCHDOG=1 was sent though WATCHDOG_PID names another process")
        _ = try sv.waitForExit()

        // A relative NOTIFY_SOCKET is not systemd's: no datagrams, and the supervisor runs.
        let other = try RunningSupervisor(w, environment: ["NOTIFY_SOCKET": "relative.sock"])
        #expect(try other.cli("call", "k.one", "ping").code == 0)
    }

    @Test("systemd: a wedged event loop stops WATCHDOG=1 until it turns again")
    func wedgedLoopStopsWatchdog() throws {
        let w = try TestWorld()
        try w.bundle("k.one")
        let notify = try FakeNotifySocket(path: w.root + "/notify.sock")
        defer { notify.close() }
        let sv = try RunningSupervisor(w, environment: ["NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "100000"], waitForReady: false)
        try notify.wait("READY=1") { $0.contains("READY=1") }
        try notify.wait("5 WATCHDOG=1") { _ in notify.count { $0 == "WATCHDOG=1" } >= 5 }

        // The debug-only hook holds the loop for 1.5 s after answering.
        let conn = try rawControl(sv.socket)
        defer { conn.close() }
        var b = FrameBuilder(kind: .debugWedge)
        b.uint("id", 1)
        b.uint("timeoutMs", 1500)
        try conn.sendFrame(b.finish())
        let answer = try #require(try conn.receiveFrame())
        #expect(String(decoding: answer, as: UTF8.self).contains("wedged"))
        let wedgedAt = Date()
        let beatsBefore = notify.count { $0 == "WATCHDOG=1" }
        // Keep-alives resume once the loop turns again.
        try notify.wait("WATCHDOG=1 after the wedge", timeout: 10) { _ in notify.count { $0 == "WATCHDOG=1" } >= beatsBefore + 2 }
        let beats = notify.received.filter { $0.text == "WATCHDOG=1" }.map(\.at)
        let longest = zip(beats.dropFirst(), beats).map { $0.timeIntervalSince($1) }.max() ?? 0
        #expect(longest >= 1.3, "the longest gap between keep-alives was \(longest) s; the loop was held 1.5 s")
        #expect(Date().timeIntervalSince(wedgedAt) >= 1.3)
    }

    @Test("the shipped systemd unit passes systemd-analyze verify",
          .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/systemd-analyze"), "needs systemd-analyze (Debian's systemd package)"))
    func unitFileVerifies() throws {
        let w = try TestWorld()
        let unit = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("dist/systemd/sandboxed-plugins.service").path
        let text = try String(contentsOfFile: unit, encoding: .utf8)
        for setting in ["Type=notify", "WatchdogSec=", "ExecReload=", "KillMode=mixed", "Delegate=yes", "NoNewPrivileges=yes",
                        "ProtectSystem=strict", "SystemCallArchitectures=native", "RestrictAddressFamilies="] {
            #expect(text.contains("\n" + setting), "the unit lacks \(setting)")
        }
        // As it stands in the repository, with nothing installed in /opt.
        let asShipped = try Shell.run("/usr/bin/systemd-analyze", ["verify", unit])
        #expect(asShipped.code == 0 && asShipped.err.isEmpty && asShipped.out.isEmpty, "systemd-analyze verify \(unit): \(asShipped.code)\n\(asShipped.out)\(asShipped.err)")
        // And pointed at this build's supervisor.
        let copy = w.root + "/sandboxed-plugins.service"
        try text.replacingOccurrences(of: "/opt/sandboxed-plugins/bin", with: Build.dir).write(toFile: copy, atomically: true, encoding: .utf8)
        let r = try Shell.run("/usr/bin/systemd-analyze", ["verify", copy])
        #expect(r.code == 0 && r.err.isEmpty && r.out.isEmpty, "systemd-analyze verify: \(r.code)\n\(r.out)\(r.err)")
    }

    // MARK: Metrics

    @Test("metrics: exact counter deltas after calls, an error, a timeout, a crash and its restart; the HTTP endpoint serves the same")
    func metrics() throws {
        let w = try TestWorld()
        try w.bundle("k.one", extra: ["restart": "always"])
        try w.bundle("k.later", extra: ["activation": "onCall"])
        let port = try freeLocalPort()
        let config = w.root + "/config.json"
        try #"{"metrics": {"listen": "127.0.0.1:\#(port)"}}"#.write(toFile: config, atomically: true, encoding: .utf8)
        let sv = try RunningSupervisor(w, args: ["--config", config])
        let first = try sv.cli("metrics").out
        let before = try Prometheus(first)
        #expect(before["plugin_up", ["plugin": "k.one"]] == 1)
        // Down by design, told apart from down by failure.
        #expect(before["plugin_up", ["plugin": "k.later"]] == 0 && before["plugin_inactive", ["plugin": "k.later"]] == 1)
        #expect(before["plugin_inactive", ["plugin": "k.one"]] == 0)
        // Every SPEC §10 family from the first scrape on, before any call, restart, denial or install.
        let families = ["plugin_up": "gauge", "plugin_inactive": "gauge", "plugin_calls_total": "counter", "plugin_call_duration_seconds": "histogram",
                        "plugin_restarts_total": "counter", "plugin_resident_memory_bytes": "gauge", "plugin_cpu_seconds_total": "counter",
                        "plugin_sandbox_denials_total": "counter", "supervisor_installs_total": "counter",
                        "plugin_streams_total": "counter", "plugin_stream_chunks_total": "counter", "plugin_calls_replayed_total": "counter",
                        "plugin_calls_retried_total": "counter", "supervisor_upgrades_total": "counter",
                        "supervisor_control_clients_dropped_total": "counter"]
        for (family, type) in families {
            #expect(before.types[family] == type, "\(family): \(String(describing: before.types[family]))")
            #expect(first.components(separatedBy: "# HELP \(family) ").count == 2, "\(family)'s HELP line once")
        }
        for i in 0..<7 { #expect(try sv.cli("call", "k.one", "echo", "[\(i)]").code == 0) }
        // Two calls the sandbox refuses (a socket without a network permission).
        for _ in 0..<2 { #expect(try sv.cli("call", "k.one", "socket").out.trimmingCharacters(in: .whitespacesAndNewlines) == "\(EPERM)") }
        #expect(try sv.cli("call", "k.one", "fail").code != 0)
        #expect(try sv.cli("call", "k.one", "sleep", #"{"ms":3000}"#, "--timeout", "100").err.contains("timeout"))
        let pidBefore = try sv.plugin("k.one").pid
        #expect(try sv.cli("call", "k.one", "crash", #"{"how":"segv"}"#).err.contains("unavailable"))
        try sv.waitUntil("the restart") { let p = try sv.plugin("k.one"); return p.state == "running" && p.pid != pidBefore }
        let reason = try #require(try sv.plugin("k.one").lastExit?.reason).rawValue

        let afterText = try sv.cli("metrics").out
        let after = try Prometheus(afterText)
        for family in families.keys { #expect(afterText.components(separatedBy: "# HELP \(family) ").count == 2, "\(family)'s HELP line once") }
        func delta(_ name: String, _ labels: [String: String]) -> Double {
            (after[name, labels] ?? 0) - (before[name, labels] ?? 0)
        }
        #expect(delta("plugin_calls_total", ["plugin": "k.one", "outcome": "ok"]) == 9)  // 7 echoes, 2 socket calls
        #expect(delta("plugin_calls_total", ["plugin": "k.one", "outcome": "error"]) == 1)
        #expect(delta("plugin_calls_total", ["plugin": "k.one", "outcome": "timeout"]) == 1)
        #expect(delta("plugin_calls_total", ["plugin": "k.one", "outcome": "unavailable"]) == 1)
        #expect(delta("plugin_call_duration_seconds_count", ["plugin": "k.one"]) == 12)
        #expect(delta("plugin_restarts_total", ["plugin": "k.one", "reason": reason]) == 1)
        #expect(after["plugin_up", ["plugin": "k.one"]] == 1)
        // What the sandbox refused is counted as status counts it: those two, and nothing of the
        // Swift runtime's own (libdispatch's syslog socket is not tried: Spawner.baseEnvironment).
        #expect(try sv.plugin("k.one").sandboxDenials == ["socket": 2])
        #expect(delta("plugin_sandbox_denials_total", ["plugin": "k.one", "syscall": "socket"]) == 2)
        #expect(after["plugin_sandbox_denials_total", ["plugin": "k.one", "syscall": "socket"]] == 2)
        #expect((after["plugin_resident_memory_bytes", ["plugin": "k.one"]] ?? 0) > 1_000_000)
        #expect(after.types["plugin_call_duration_seconds"] == "histogram")
        #expect(after.types["plugin_calls_total"] == "counter")
        // The slow call sits in a bucket of at least 0.1 s.
        #expect((after["plugin_call_duration_seconds_bucket", ["plugin": "k.one", "le": "0.05"]] ?? 0)
                < (after["plugin_call_duration_seconds_bucket", ["plugin": "k.one", "le": "+Inf"]] ?? 0))

        // A call the sandbox did not like (none here) and a denied plugin→plugin call.
        try w.bundle("k.caller")
        #expect(try sv.cli("reload").code == 0)
        let denied = try sv.cli("call", "k.caller", "call", #"{"target":"k.one","method":"ping"}"#)
        #expect(denied.err.contains("denied"))

        // The same families over HTTP, with the counts moved on by what happened since.
        let http = try Prometheus(httpGet(port: port, path: "/metrics"))
        #expect(http["plugin_calls_total", ["plugin": "k.one", "outcome": "ok"]] == after["plugin_calls_total", ["plugin": "k.one", "outcome": "ok"]])
        #expect(http["plugin_calls_total", ["plugin": "k.one", "outcome": "denied"]] == 1)
        #expect(http["plugin_up", ["plugin": "k.caller"]] == 1)
        let notFound = try httpGet(port: port, path: "/nope", expectStatus: 404)
        #expect(notFound.contains("/metrics"))
        _ = try httpGet(port: port, path: "/metrics", method: "POST", expectStatus: 405)
    }

    @Test("metrics.listen: a setting without a host, or with a bad port, is refused with the reason")
    func metricsListenChecked() throws {
        let w = try TestWorld()
        for (value, reason) in [(":9464", "names no address"), ("127.0.0.1:0", "port"), ("example.com:9464", "not an IP address")] {
            let config = w.root + "/bad.json"
            try #"{"metrics": {"listen": "\#(value)"}}"#.write(toFile: config, atomically: true, encoding: .utf8)
            let r = try Shell.run(Build.supervisor, ["start", "--home", w.home, "--config", config])
            #expect(r.code == 2)
            #expect(r.err.contains("metrics") && r.err.contains(reason), "\(value): \(r.err)")
        }
    }

    // MARK: Logs

    @Test("--log-format json: every stderr line is one JSON object with time, level, message; plugin lines carry their plugin")
    func jsonLogs() throws {
        let w = try TestWorld()
        try w.bundle("k.one")
        let sv = try RunningSupervisor(w, args: ["--log-format", "json", "--log-level", "debug"])
        #expect(try sv.cli("call", "k.one", "stderr", #"{"line":"a \"quoted\" line\tfrom the plugin"}"#).code == 0)
        #expect(try sv.cli("call", "k.one", "junk").code == 0)
        #expect(try sv.cli("call", "k.one", "echo", "[1]", "--traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01").code == 0)
        try sv.waitUntil("the plugin's stderr line in the log") { sv.log.contains("from the plugin") }
        #expect(try sv.cli("stop").code == 0)
        #expect(try sv.waitForExit() == 0)

        var objects: [[String: Any]] = []
        for line in sv.log.split(separator: "\n") {
            let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
            let o = try #require(object, "not a JSON object: \(line)")
            #expect(o["time"] is String && o["level"] is String && o["message"] is String, "\(line)")
            objects.append(o)
        }
        #expect(objects.count > 5)
        let fromPlugin = try #require(objects.first { ($0["message"] as? String)?.contains("a \"quoted\" line\tfrom the plugin") == true })
        #expect(fromPlugin["plugin"] as? String == "k.one")
        #expect(objects.contains { ($0["message"] as? String)?.contains("JUNK-LINE-FROM-PLUGIN") == true && $0["plugin"] as? String == "k.one" })
        let callLog = try #require(objects.first { $0["trace_id"] as? String == "0af7651916cd43dd8448eb211c80319c" })
        #expect(callLog["level"] as? String == "debug")
        #expect((callLog["span_id"] as? String)?.count == 16)
        #expect((callLog["duration_ms"] as? Double).map { $0 >= 0 } == true, "a number: \(String(describing: callLog["duration_ms"]))")
        let time = try #require(objects.first?["time"] as? String)
        #expect(time.hasSuffix("Z") && time.count == 27, "\(time)")

        // Why it cannot start is a line of that log too (the metrics port taken, a config wrong).
        let taken = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(taken) }
        var address = sockaddr_in(sin_family: sa_family_t(AF_INET), sin_port: 0, sin_addr: in_addr(s_addr: inet_addr("127.0.0.1")), sin_zero: (0, 0, 0, 0, 0, 0, 0, 0))
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(taken, $0, length) } }
        _ = listen(taken, 1)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(taken, $0, &length) } }
        let port = Int(UInt16(bigEndian: address.sin_port))
        let second = try TestWorld()
        for config in [#"{"metrics": {"listen": "127.0.0.1:\#(port)"}}"#, #"{"metrics": {"listen": "bogus"}}"#] {
            let r = try Shell.run(Build.supervisor, ["start", "--home", second.home, "--plugins", second.plugins, "--config", try second.config(config),
                                                     "--log-format", "json"])
            #expect(r.code != 0)
            let lines = r.err.split(separator: "\n")
            for line in lines { #expect((try? JSONSerialization.jsonObject(with: Data(line.utf8))) is [String: Any], "not a JSON object: \(line)") }
            #expect(lines.last?.contains(#""level":"critical""#) == true && lines.last?.contains("listen") == true, "\(r.err)")
        }
    }

    // MARK: Trace context

    @Test("traceparent: a client's trace id reaches the plugin with a new span id, and a plugin→plugin call keeps it")
    func traceContext() throws {
        let w = try TestWorld()
        try w.bundle("k.back")
        try w.bundle("k.front", deps: [Dep("k.back")])
        let sv = try RunningSupervisor(w)
        let trace = "4bf92f3577b34da6a3ce929d0e0e4736"
        let given = "00-\(trace)-00f067aa0ba902b7-01"
        let seen = try sv.call("k.front", "traceparent", nil, traceparent: given)
        let parts = seen.split(separator: "-")
        #expect(parts.count == 4 && parts[1] == trace && parts[3] == "01", "\(seen)")
        #expect(parts[2] != "00f067aa0ba902b7", "the supervisor gives each hop a span id of its own")
        // A sync handler sees it too.
        let seenSync = try sv.call("k.front", "syncTraceparent", nil, traceparent: given)
        #expect(seenSync.split(separator: "-").count == 4 && seenSync.split(separator: "-")[1] == trace, "\(seenSync)")

        // Through the front plugin to the back one: the same trace, another span.
        let nested = try sv.call("k.front", "call", #"{"target":"k.back","method":"traceparent"}"#, traceparent: given)
        let nestedParts = nested.split(separator: "-")
        #expect(nestedParts.count == 4 && nestedParts[1] == trace, "\(nested)")
        #expect(nestedParts[2] != parts[2] && nestedParts[2] != "00f067aa0ba902b7")

        // None given: a new trace, unsampled, a fresh one per call.
        let fresh1 = try sv.call("k.front", "traceparent", nil, traceparent: nil)
        let fresh2 = try sv.call("k.front", "traceparent", nil, traceparent: nil)
        #expect(fresh1.count == 55 && fresh1.hasPrefix("00-") && fresh1.hasSuffix("-00"), "\(fresh1)")
        #expect(fresh1.split(separator: "-")[1] != fresh2.split(separator: "-")[1])
        // And a plugin→plugin call without one from the client still shares the front plugin's trace.
        let chained = try sv.call("k.front", "call", #"{"target":"k.back","method":"traceparent"}"#, traceparent: nil)
        #expect(chained.count == 55)

        // A malformed one (uppercase hex) is not continued: a new trace starts.
        let upper = "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01"
        let conn = try rawControl(sv.socket)
        defer { conn.close() }
        try conn.sendFrame(callFrame(id: 1, target: "k.front", method: "traceparent", traceparent: upper))
        let reply = String(decoding: try #require(try conn.receiveFrame()), as: UTF8.self)
        #expect(!reply.lowercased().contains(trace) && reply.contains("\"result\":\"00-"), "\(reply)")
        // The CLI refuses it up front, naming the format.
        let refused = try sv.cli("call", "k.front", "traceparent", "--traceparent", upper)
        #expect(refused.code != 0 && refused.err.contains("lowercase hex"))
    }
}

extension RunningSupervisor {
    /// `supervisor call` with an optional `--traceparent`; the JSON string result.
    func call(_ id: String, _ method: String, _ params: String?, traceparent: String?) throws -> String {
        var args = ["call", id, method]
        if let params { args.append(params) }
        if let traceparent { args += ["--traceparent", traceparent] }
        let r = try cli(args)
        guard r.code == 0 else { throw HarnessError("call \(id) \(method) failed (\(r.code)): \(r.err)") }
        return try JSONDecoder().decode(String.self, from: Data(r.out.utf8))
    }
}

/// A datagram socket standing in for systemd's `NOTIFY_SOCKET`, read by a thread of its own.
final class FakeNotifySocket: @unchecked Sendable {
    // @unchecked: `messages` and `open` are read and written under `lock` only.
    struct Message { var at: Date; var text: String }
    let path: String
    private let fd: Int32
    private let lock = NSLock()
    private var messages: [Message] = []
    private var open = true

    init(path: String) throws {
        self.path = path
        unlink(path)
        let sock = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard sock >= 0 else { throw HarnessError("socket: \(errno)") }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { out in
            for (i, b) in path.utf8.enumerated() where i < out.count - 1 { out[i] = b }
        }
        let rc = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(sock, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard rc == 0 else { Glibc.close(sock); throw HarnessError("bind \(path): \(errno)") }
        var timeout = timeval(tv_sec: 0, tv_usec: 50_000)
        setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        fd = sock
        let fd = sock
        let thread = Thread { [weak self] in
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let n = recv(fd, &buffer, buffer.count, 0)
                guard let self else { return }
                if n > 0 {
                    let text = String(decoding: buffer[..<n], as: UTF8.self)
                    self.lock.withLock { self.messages.append(Message(at: Date(), text: text)) }
                }
                if !self.lock.withLock({ self.open }) { return }
            }
        }
        thread.start()
    }

    var received: [Message] { lock.withLock { messages } }

    func count(_ matching: (String) -> Bool) -> Int { received.filter { matching($0.text) }.count }

    /// Waits until a message satisfies `condition` (or, for conditions on the whole list, until it
    /// returns true for any message); returns the first message that did.
    @discardableResult
    func wait(_ what: String, timeout: TimeInterval = 30, _ condition: (String) -> Bool) throws -> Message {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let hit = received.first(where: { condition($0.text) }) { return hit }
            usleep(10_000)
        }
        throw HarnessError("timed out waiting for \(what); received: \(received.map(\.text))")
    }

    func close() {
        lock.withLock { open = false }
        usleep(60_000)
        Glibc.close(fd)
        unlink(path)
    }
}

/// The Prometheus text format, parsed: samples by name and labels, and each family's TYPE.
struct Prometheus {
    struct Key: Hashable { var name: String; var labels: [String: String] }
    var samples: [Key: Double] = [:]
    var types: [String: String] = [:]

    init(_ text: String) throws {
        for line in text.split(separator: "\n") {
            if line.hasPrefix("# TYPE ") {
                let parts = line.split(separator: " ")
                if parts.count == 4 { types[String(parts[2])] = String(parts[3]) }
                continue
            }
            if line.hasPrefix("#") || line.isEmpty { continue }
            guard let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...]) else {
                throw HarnessError("not a sample line: \(line)")
            }
            let series = line[..<space]
            var labels: [String: String] = [:]
            var name = String(series)
            if let open = series.firstIndex(of: "{") {
                name = String(series[..<open])
                guard series.hasSuffix("}") else { throw HarnessError("unclosed labels: \(line)") }
                let body = series[series.index(after: open)..<series.index(before: series.endIndex)]
                // label="value" pairs; values here hold no commas or quotes.
                for pair in body.split(separator: ",") {
                    guard let eq = pair.firstIndex(of: "=") else { throw HarnessError("bad label: \(line)") }
                    labels[String(pair[..<eq])] = String(pair[pair.index(eq, offsetBy: 2)..<pair.index(before: pair.endIndex)])
                }
            }
            guard name.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "_" || $0 == ":" }) else { throw HarnessError("bad name: \(line)") }
            samples[Key(name: name, labels: labels)] = value
        }
    }

    subscript(_ name: String, _ labels: [String: String]) -> Double? { samples[Key(name: name, labels: labels)] }
}

/// A plain HTTP/1.1 request over a TCP socket; returns the body, checking the status.
func httpGet(port: Int, path: String, method: String = "GET", expectStatus: Int = 200) throws -> String {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw HarnessError("socket: \(errno)") }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = in_port_t(UInt16(port).bigEndian)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    let rc = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard rc == 0 else { throw HarnessError("connect 127.0.0.1:\(port): \(errno)") }
    let request = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    _ = request.withCString { send(fd, $0, strlen($0), 0) }
    var response: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 65536)
    while true {
        let n = recv(fd, &buffer, buffer.count, 0)
        if n <= 0 { break }
        response += buffer[..<n]
    }
    let text = String(decoding: response, as: UTF8.self)
    guard let headEnd = text.range(of: "\r\n\r\n") else { throw HarnessError("no HTTP answer: \(text)") }
    let status = text.split(separator: " ").dropFirst().first.flatMap { Int($0) }
    guard status == expectStatus else { throw HarnessError("HTTP \(status ?? -1), expected \(expectStatus): \(text)") }
    return String(text[headEnd.upperBound...])
}
