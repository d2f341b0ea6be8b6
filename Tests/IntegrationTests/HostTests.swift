import Foundation
import Logging
import MetricsTestKit
import PluginHost
import PluginProtocol
import Protocol
import ServiceLifecycle
import Synchronization
import Testing

/// `PluginHost` (SPEC §12, docs/host.md): the supervisor inside this test process, with real
/// workers and the TestKit plugin.
@Suite(.serialized, .timeLimit(.minutes(3)))
struct HostTests {
    /// TestKit's `call` and `callHost` params.
    struct CallParams<P: Encodable & Sendable>: Encodable, Sendable {
        var target: String
        var method: String
        var params: P?
    }

    /// A host over `world`'s plugins, running on a task of its own until the test ends.
    static func start(_ world: TestWorld, _ tune: (inout PluginHost.Configuration) -> Void = { _ in }) async throws -> (PluginHost, Task<Void, any Error>) {
        var configuration = PluginHost.Configuration(pluginFolders: [world.plugins], home: world.home)
        tune(&configuration)
        var logger = Logger(label: "host-test")
        logger.logLevel = .warning
        let host = PluginHost(configuration: configuration, logger: logger)
        let running = Task { try await host.run() }
        try await host.waitUntilReady()
        return (host, running)
    }

    @Test("a program's settings are held to what the config file is: a frame limit under 1 MiB stops run with the reason")
    func aFrameLimitTooSmallIsRefused() async throws {
        let w = try TestWorld()
        var configuration = PluginHost.Configuration(pluginFolders: [w.plugins], home: w.home)
        configuration.settings.maxFrameBytes = 64
        let host = PluginHost(configuration: configuration, logger: Logger(label: "host-test"))
        await #expect { try await host.run() } throws: { "\($0)".contains("'maxFrameBytes' is 64; it is at least 1048576") }
    }

    @Test("an embedded host calls, opens, sends and reads status straight from the program; a cancelled task cancels its call in the plugin")
    func callsFromTheProgram() async throws {
        let w = try TestWorld()
        try w.bundle("h.a")
        try w.bundle("h.b", deps: [Dep("h.a")])
        let (host, running) = try await Self.start(w)
        #expect(try await host.call("h.a", "ping", as: Int.self) == 1)
        #expect(try await host.call("h.b", "echo", ["x": 1], as: [String: Int].self) == ["x": 1])
        // Plugin → plugin as usual.
        #expect(try await host.call("h.b", "call", CallParams<Int>(target: "h.a", method: "ping"), as: Int.self) == 1)
        await #expect(throws: ErrorBody.self) { try await host.call("h.nope", "ping", as: Int.self) }
        do {
            _ = try await host.call("h.nope", "ping", as: Int.self)
        } catch let error as ErrorBody {
            #expect(error.code == "notFound")
        }
        let status = try await host.status()
        #expect(status.map(\.identifier) == ["h.a", "h.b"])
        #expect(status.allSatisfy { $0.state == "running" && $0.pid != nil })
        let sent = try await host.send(.memoryWarning, to: "h.a")
        #expect(sent.delivered == ["h.a"])
        // A call whose task is cancelled: the plugin gets `cancel` (TestKit records it).
        let slow = Task { try await host.call("h.a", "sleep", ["ms": 20_000], as: Int.self, timeout: .seconds(30)) }
        try await waitUntil("the sleep to start") { try await host.call("h.a", "info", as: KitInfo.self).names.contains("sleeping:20000") }
        slow.cancel()
        await #expect(throws: CancellationError.self) { try await slow.value }
        try await waitUntil("the plugin to hear cancel") { try await host.call("h.a", "info", as: KitInfo.self).names.contains("cancelled:20000") }
        // The control socket serves the CLI too.
        let cli = try Shell.run(Build.dir + "/supervisor", ["status", "--json", "--home", w.home])
        #expect(cli.code == 0 && cli.out.contains("\"h.b\""))
        await host.shutdown()
        try await running.value
        await #expect(throws: ErrorBody.self) { try await host.call("h.a", "ping", as: Int.self) }
    }

    @Test("host methods: a plugin's @host call gets the program's answer; denied without the permission, notFound with no provider, pluginError when it throws, timeout (and cancelled) when it never returns, unavailable past 64 in flight")
    func hostMethods() async throws {
        let w = try TestWorld()
        try w.bundle("h.allowed", extra: ["permissions": ["host.call:greet", "host.call:fail", "host.call:hang", "host.call:missing", "host.call:own"]])
        try w.bundle("h.all", extra: ["permissions": ["host.call:*"]])
        try w.bundle("h.none")
        let (host, running) = try await Self.start(w) {
            $0.callTimeoutMs = 800
            $0.maxFrameBytes = 1 << 20
        }
        struct Name: Codable, Sendable { var name: String }
        struct Broken: Error {}
        let hung = Atomic<Int>(0)
        let cancelled = Atomic<Int>(0)
        host.method("greet") { (p: Name) in "hello \(p.name)" }
        host.method("huge") { (_: String?) in String(repeating: "x", count: 2 << 20) }
        host.method("fail") { (_: String?) -> String in throw Broken() }
        host.method("own") { (_: String?) -> String in throw ErrorBody(code: "myOwnCode", message: "not today") }
        host.method("hang") { (_: String?) -> String in
            hung.add(1, ordering: .relaxed)
            do { try await Task.sleep(for: .seconds(60)) } catch { cancelled.add(1, ordering: .relaxed) }
            return "late"
        }
        func viaPlugin<P: Encodable & Sendable>(_ plugin: String, _ method: String, _ params: P?, method callName: String = "callHost") async throws -> String {
            try await host.call(plugin, callName, CallParams(target: "@host", method: method, params: params), as: String.self, timeout: .seconds(10))
        }
        func viaPlugin(_ plugin: String, _ method: String) async throws -> String { try await viaPlugin(plugin, method, String?.none) }
        func code(_ body: () async throws -> String) async -> String? {
            do {
                let answer = try await body()
                return answer.isEmpty ? "" : nil
            } catch {
                return (error as? ErrorBody)?.code ?? "\(error)"
            }
        }
        #expect(try await viaPlugin("h.allowed", "greet", Name(name: "Ada")) == "hello Ada")
        // TestKit's plain `call` with target @host is the same message.
        #expect(try await viaPlugin("h.all", "greet", Name(name: "Bo"), method: "call") == "hello Bo")
        #expect(await code { try await viaPlugin("h.none", "greet", Name(name: "x")) } == "denied")
        #expect(await code { try await viaPlugin("h.allowed", "missing") } == "notFound")
        #expect(await code { try await viaPlugin("h.allowed", "fail") } == "pluginError")
        // A code of the program's own reaches the plugin as it is, as a plugin's own reach its callers.
        #expect(await code { try await viaPlugin("h.allowed", "own") } == "myOwnCode")
        #expect(await code { try await viaPlugin("h.allowed", "greet", "not an object") } == "badRequest")
        #expect(await code { try await viaPlugin("h.allowed", "hang") } == "timeout")
        // An answer over the frame limit is the host method's error; the plugin's worker lives on.
        let pid = try await host.status().first { $0.identifier == "h.all" }?.pid
        let huge = await code { try await viaPlugin("h.all", "huge") }
        #expect(huge == "pluginError", "\(huge)")
        #expect(try await host.status().first { $0.identifier == "h.all" }?.pid == pid)
        #expect(try await viaPlugin("h.all", "greet", Name(name: "still")) == "hello still")
        try await waitUntil("the hung handler to be cancelled") { cancelled.load(ordering: .relaxed) == 1 }
        // 80 at once from one plugin: the host runs at most 64, the rest are refused at once.
        let codes = await withTaskGroup(of: String?.self) { group in
            for _ in 0..<80 { group.addTask { await code { try await viaPlugin("h.all", "hang") } } }
            return await group.reduce(into: [String?]()) { $0.append($1) }
        }
        #expect(codes.filter { $0 == "unavailable" }.count == 16)
        #expect(codes.filter { $0 == "timeout" }.count == 64)
        #expect(hung.load(ordering: .relaxed) == 65)
        let metrics = try await host.metrics()
        #expect(metrics.contains("plugin_calls_total{outcome=\"denied\",plugin=\"@host\"} 1") || metrics.contains("plugin=\"@host\",outcome=\"denied\"} 1"))
        await host.shutdown()
        try await running.value
    }

    @Test("the host's calls go over a direct link after the first (answered while the supervisor's loop is held); a restart of the plugin with four lanes of calls over it loses none, and a new link follows")
    func directLink() async throws {
        let w = try TestWorld()
        try w.bundle("h.l")
        let (host, running) = try await Self.start(w)
        #expect(try await host.call("h.l", "ping", as: Int.self) == 1)
        try await waitUntil("the direct link") { host.linkedPlugins == ["h.l"] }
        // The loop held for 1.5 s (debugWedge, through the host's control socket): a call over the link does not notice.
        try holdLoop(w.home + "/supervisor.sock", milliseconds: 1_500)
        let started = ContinuousClock.now
        #expect(try await host.call("h.l", "echo", "past the loop", as: String.self) == "past the loop")
        #expect(ContinuousClock.now - started < .milliseconds(1_000))
        let pid = try await host.status().first?.pid
        #expect(try await failedCalls({ try await host.call("h.l", "echo", $0, as: Int.self, timeout: .seconds(10)) }) {
            _ = try await host.restart("h.l")
        } == 0)
        #expect(try await host.status().first?.pid != pid)
        try await waitUntil("a link to the new worker") { host.linkedPlugins == ["h.l"] }
        await host.shutdown()
        try await running.value
    }

    @Test("a host method is in effect when method() returns, even while the loop is held: a plugin's call of it over a direct link finds it, and a body provided again answers the next call")
    func aMethodIsThereWhenMethodReturns() async throws {
        let w = try TestWorld()
        try w.bundle("h.caller", extra: ["permissions": ["host.call:late"]])
        let (host, running) = try await Self.start(w)
        #expect(try await host.call("h.caller", "ping", as: Int.self) == 1)
        try await waitUntil("the direct link") { host.linkedPlugins == ["h.caller"] }
        // The loop held for 1 s; the test knows it is held once a status request goes unanswered.
        let wedge = try rawControl(w.home + "/supervisor.sock")
        defer { wedge.close() }
        var frame = FrameBuilder(kind: .debugWedge)
        frame.uint("id", 1)
        frame.uint("timeoutMs", 1_000)
        try wedge.sendFrame(frame.finish())
        let probe = try rawControl(w.home + "/supervisor.sock")
        defer { probe.close() }
        var timeout = timeval(tv_sec: 0, tv_usec: 50_000)
        setsockopt(probe.fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        try await waitUntil("the loop held") {
            var status = FrameBuilder(kind: .status)
            status.uint("id", 2)
            try probe.sendFrame(status.finish())
            return (try? probe.receiveFrame()) == nil
        }
        // Provided while the loop is held: in effect at once (the loop orders it when it runs again).
        host.method("late") { (_: String?) in "here" }
        // Over the link, past the loop: the plugin's @host call finds it.
        let answer = try await host.call("h.caller", "callHost", CallParams<String>(target: "@host", method: "late"), as: String.self)
        #expect(answer == "here")
        // Provided again with another body: the next call gets the new one.
        host.method("late") { (_: String?) in "here again" }
        let again = try await host.call("h.caller", "callHost", CallParams<String>(target: "@host", method: "late"), as: String.self)
        #expect(again == "here again")
        await host.shutdown()
        try await running.value
    }

    @Test("events: a plugin crashed on purpose (SIGSEGV to its pid) is heard as exited, restarting, then started with a new pid")
    func crashEvents() async throws {
        let w = try TestWorld()
        try w.bundle("h.crashy")
        let (host, running) = try await Self.start(w)
        var events = host.events(plugin: "h.crashy").makeAsyncIterator()
        let pid = try #require(try await host.status().first?.pid)
        kill(pid, SIGSEGV)
        let exited = try await nextEvent(&events, "exited") { $0.event == .exited }
        #expect(exited.pid == pid && exited.lastExit?.signal == "SIGSEGV")
        let restarting = try await nextEvent(&events, "restarting") { $0.event == .restarting }
        #expect(restarting.attempt == 1 && restarting.delay == restarting.delayMs.map { Double($0) / 1000 })
        let started = try await nextEvent(&events, "started") { $0.event == .started }
        #expect(started.pid != nil && started.pid != pid && started.version == "1.0.0")
        #expect(try await host.call("h.crashy", "ping", as: Int.self) == 1)
        await host.shutdown()
        try await running.value
        // The stream ends with the host, after the stop's own `exited`.
        var last: HostEvent?
        while let event = try await events.next() { last = event }
        #expect(last?.event == .exited && last?.lastExit?.reason == .stopped)
    }

    @Test("an embedded host reports through the program's swift-metrics backend: calls by outcome, their durations, up, memory, CPU time and restarts, under SPEC §10's names")
    func programMetrics() async throws {
        let w = try TestWorld()
        try w.bundle("h.m")
        let metrics = TestMetrics()
        let (host, running) = try await Self.start(w) { $0.metricsFactory = metrics }
        for _ in 0..<5 { _ = try await host.call("h.m", "ping", as: Int.self) }
        await #expect(throws: ErrorBody.self) { try await host.call("h.m", "fail", as: String.self) }
        let plugin = ("plugin", "h.m")
        try await waitUntil("the calls in the program's backend") {
            try metrics.expectCounter("plugin_calls_total", [plugin, ("outcome", "ok")]).totalValue == 5
                && metrics.expectCounter("plugin_calls_total", [plugin, ("outcome", "error")]).totalValue == 1
        }
        #expect(try metrics.expectTimer("plugin_call_duration_seconds", [plugin]).values.count == 6)
        #expect(try metrics.expectGauge("plugin_up", [plugin]).lastValue == 1)
        #expect(try (metrics.expectGauge("plugin_resident_memory_bytes", [plugin]).lastValue ?? 0) > 0)
        let pid = try #require(try await host.status().first?.pid)
        kill(pid, SIGSEGV)
        try await waitUntil("the restart in the program's backend") {
            try metrics.expectCounter("plugin_restarts_total", [plugin, ("reason", "signaled")]).totalValue == 1
        }
        // The host's own registry counts too.
        #expect(try await host.metrics().contains("plugin_calls_total"))
        await host.shutdown()
        try await running.value
    }

    @Test("shutdown before run, during start-up and twice ends cleanly; a second run is refused")
    func shutdownAtOddTimes() async throws {
        let w = try TestWorld()
        try w.bundle("h.slow")
        try "3000".write(toFile: w.plugins + "/h.slow/startup-delay-ms", atomically: true, encoding: .utf8)
        var configuration = PluginHost.Configuration(pluginFolders: [w.plugins], home: w.home)
        configuration.controlSocket = false
        let never = PluginHost(configuration: configuration, logger: Logger(label: "host-test"))
        await never.shutdown()
        await #expect(throws: ErrorBody.self) { try await never.waitUntilReady() }
        try await never.run()  // returns at once: it was shut down first
        let host = PluginHost(configuration: configuration, logger: Logger(label: "host-test"))
        let running = Task { try await host.run() }
        try await waitUntil("the slow plugin to be starting") { (try? await host.status())?.first?.state == "starting" }
        let started = ContinuousClock.now
        async let first: Void = host.shutdown()
        async let second: Void = host.shutdown()
        _ = await (first, second)
        try await running.value
        #expect(ContinuousClock.now - started < .seconds(10))
        await #expect(throws: ErrorBody.self) { try await host.waitUntilReady() }
        await #expect(throws: ErrorBody.self) { try await host.run() }
        await host.shutdown()
    }

    @Test("before run(): requests say the host is not running (not notFound); waitUntilReady reminds after 5 s that run() starts it, and returns once run() comes late")
    func requestsBeforeRun() async throws {
        let w = try TestWorld()
        try w.bundle("h.early")
        var configuration = PluginHost.Configuration(pluginFolders: [w.plugins], home: w.home)
        configuration.controlSocket = false
        let said = Guarded<[String]>([])
        let host = PluginHost(configuration: configuration, logger: Logger(label: "host-test") { _ in CapturingLog(said) })
        for request in ["call", "status", "stream"] {
            do {
                switch request {
                case "call": _ = try await host.call("h.early", "ping", as: Int.self)
                case "status": _ = try await host.status()
                default: for try await _ in host.stream("h.early", "rows", ["count": 1], as: [String: Int].self) {}
                }
                Issue.record("\(request) before run() succeeded")
            } catch let error as ErrorBody {
                #expect(error.code == "unavailable" && error.message.contains("call run()"), "\(request): \(error)")
            }
        }
        let waiting = Task { try await host.waitUntilReady() }
        try await waitUntil("the reminder", within: 15) { said.withLock { $0 }.contains { $0.contains("run() has not been called") } }
        let running = Task { try await host.run() }
        try await waiting.value
        #expect(try await host.call("h.early", "ping", as: Int.self) == 1)
        await host.shutdown()
        try await running.value
    }

    @Test("a shutdown right after run starts (before any plugin was loaded) ends run cleanly: no worker and no socket file left")
    func shutdownRightAway() async throws {
        let w = try TestWorld()
        try w.bundle("h.quick")
        let host = PluginHost(configuration: .init(pluginFolders: [w.plugins], home: w.home), logger: Logger(label: "host-test"))
        let running = Task { try await host.run() }
        await host.shutdown()
        try await running.value
        #expect(!FileManager.default.fileExists(atPath: w.home + "/supervisor.sock"))
        // Whatever started meanwhile has stopped: a new host on the same home starts and stops.
        let again = PluginHost(configuration: .init(pluginFolders: [w.plugins], home: w.home), logger: Logger(label: "host-test"))
        let second = Task { try await again.run() }
        try await again.waitUntilReady()
        #expect(try await again.call("h.quick", "ping", as: Int.self) == 1)
        await again.shutdown()
        try await second.value
    }

    @Test("a host that has stopped and is released leaves none of its threads (child watcher, seccomp answers, event loop, cgroup mover) or descriptors in the program")
    func nothingLeftBehind() async throws {
        func threads() -> [String] {
            let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
            return tasks.compactMap { try? String(contentsOfFile: "/proc/self/task/\($0)/comm", encoding: .utf8) }
                .map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
                .filter { ["child-watcher", "seccomp-notify", "cgroup-mover"].contains($0) || $0.hasPrefix("NIO-ELT") }
        }
        func open() -> [String] {
            ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []).sorted()
                .map { "\($0)→" + ((try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + $0)) ?? "?") }
        }
        func descriptors() -> Int { open().count }
        // One host first: what a process makes once (the logger's, Foundation's) is not the host's.
        for round in 0..<2 {
            let before = (threads: threads().count, descriptors: descriptors(), supervisors: PluginHost.supervisorsAlive)
            let listed = open()
            do {
                let w = try TestWorld()
                try w.bundle("h.gone")
                let (host, running) = try await Self.start(w)
                #expect(threads().count > before.threads)
                await host.shutdown()
                try await running.value
            }
            guard round == 1 else { continue }
            try await waitUntil("the host's threads to end") { threads().count <= before.threads }
            // Its engine too (the link hand-off's callbacks hold it until the hand-off is let go: 25 kB a host).
            try await waitUntil("the host's engine to be freed") { PluginHost.supervisorsAlive <= before.supervisors }
            try await waitUntil("the host's descriptors to close") { descriptors() <= before.descriptors }
            #expect(descriptors() <= before.descriptors, "more than before: \(Set(open()).subtracting(listed).sorted())")
        }
    }

    @Test("a stream read to its end lets go of its receiver: nothing of it stays in the program")
    func aFinishedStreamIsReleased() async throws {
        let w = try TestWorld()
        try w.bundle("h.rows")
        let (host, running) = try await Self.start(w)
        weak var gone: ChunkReceiver?
        do {
            let receiver = host.startStream("h.rows", "rows", params: Array(#"{"count":3}"#.utf8), input: nil, timeout: nil)
            var rows = 0
            while try await receiver.next() != nil { rows += 1 }
            #expect(rows == 3)
            gone = receiver
        }
        try await waitUntil("the finished stream's receiver to be released") { gone == nil }
        await host.shutdown()
        try await running.value
    }

    @Test("in a ServiceGroup the host starts with the group and its graceful shutdown stops the plugins in reverse dependency order")
    func serviceGroup() async throws {
        let w = try TestWorld()
        try w.bundle("h.base")
        try w.bundle("h.top", deps: [Dep("h.base")])
        var configuration = PluginHost.Configuration(pluginFolders: [w.plugins], home: w.home)
        configuration.controlSocket = false
        let host = PluginHost(configuration: configuration, logger: Logger(label: "host-test"))
        let group = ServiceGroup(configuration: .init(services: [host], logger: Logger(label: "host-test")))
        let running = Task { try await group.run() }
        try await host.waitUntilReady()
        #expect(try await host.call("h.top", "call", CallParams<Int>(target: "h.base", method: "ping"), as: Int.self) == 1)
        await group.triggerGracefulShutdown()
        try await running.value
        func terminated(_ id: String) throws -> UInt64 {
            let text = try String(contentsOfFile: w.home + "/data/\(id)/terminated", encoding: .utf8)
            return try #require(UInt64(text.split(separator: "\n").first ?? ""))
        }
        #expect(try terminated("h.top") < terminated("h.base"))
    }
}

/// `handlesSignals` in a program whose main thread and task pool were made before the host (an
/// async main, Tests/Fixtures/HostSignals): blocking the signals reaches only the threads made
/// after, and a SIGTERM the kernel gave the main thread ended the program at once, its plugins
/// never told.
@Suite(.serialized) struct HostSignalTests {
    @Test("handlesSignals, the main thread in dispatch's loop (as an async main's) or in a wait of its own: SIGTERM and SIGINT stop the plugins and end run; the program goes on, and the next one ends it",
          arguments: [(SIGTERM, "async"), (SIGINT, "async"), (SIGTERM, "sync"), (SIGINT, "sync")])
    func signalsStopTheHostNotTheProgram(_ sig: Int32, _ mode: String) async throws {
        let w = try TestWorld()
        try w.bundle("o.kit")
        let out = w.root + "/host-signals.out", err = w.root + "/host-signals.err"
        for file in [out, err] { _ = FileManager.default.createFile(atPath: file, contents: nil) }
        let program = Process()
        program.executableURL = URL(fileURLWithPath: Build.dir + "/HostSignals")
        program.arguments = [w.plugins, w.home, mode]
        program.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: out))
        program.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: err))
        try program.run()
        defer { if program.isRunning { kill(program.processIdentifier, SIGKILL) } }
        let printed = { (try? String(contentsOfFile: out, encoding: .utf8)) ?? "" }
        let logged = { (try? String(contentsOfFile: err, encoding: .utf8)) ?? "" }
        try await waitUntil("the host to be ready", within: 60) { printed().contains("ready") || !program.isRunning }
        #expect(printed().contains("ready"), "stdout: \(printed()) stderr: \(logged())")
        let status = try Shell.run(Build.supervisor, ["status", "--home", w.home, "--json"])
        let worker = try #require(try JSONDecoder().decode([PluginStatus].self, from: Data(status.out.utf8)).first?.pid, "status: \(status.out) \(status.err)")
        kill(program.processIdentifier, sig)
        try await waitUntil("run to return", within: 30) { printed().contains("stopped") || !program.isRunning }
        #expect(printed().contains("stopped") && program.isRunning,
                "run did not return, or the program ended (\(program.isRunning ? "running" : "\(program.terminationReason == .exit ? "exit" : "signal") \(program.terminationStatus)")): \(printed()) \(logged())")
        #expect(kill(worker, 0) != 0, "the worker \(worker) outlived the host")
        // The host has stopped: the signals are the program's again, and the next one ends it.
        kill(program.processIdentifier, sig)
        try await waitUntil("the program to end", within: 30) { !program.isRunning }
        #expect(program.terminationReason == .uncaughtSignal && program.terminationStatus == sig,
                "ended by \(program.terminationReason == .exit ? "exit" : "signal") \(program.terminationStatus): \(printed())")
    }
}

/// Waits for `condition` to hold, up to `seconds`.
func waitUntil(_ what: String, within seconds: Double = 15, _ condition: () async throws -> Bool) async throws {
    let deadline = ContinuousClock.now + .seconds(seconds)
    while ContinuousClock.now < deadline {
        if (try? await condition()) == true { return }
        try await Task.sleep(for: .milliseconds(20))
    }
    throw HarnessError("\(what): not within \(seconds) s")
}

/// A log handler that keeps the messages of warning and above (for tests of what the host logs).
struct CapturingLog: LogHandler {
    let said: Guarded<[String]>
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .warning
    init(_ said: Guarded<[String]>) { self.said = said }
    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }
    func log(level: Logger.Level, message: Logger.Message, metadata: Logger.Metadata?, source: String, file: String, function: String, line: UInt) {
        said.withLock { $0.append("\(message)") }
    }
}
