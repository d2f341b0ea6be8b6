import CLinuxSupport
import Foundation
import IPC
import PluginProtocol
import Protocol
import Synchronization
import SupervisorClient
import Testing

/// `supervisor upgrade` (SPEC §14; docs/operations.md "Upgrading the supervisor"): the supervisor
/// execs a new binary in place and every worker, client, link and listener carries on.
@Suite(.serialized, .timeLimit(.minutes(4)))
struct UpgradeTests {
    /// A copy of the build whose supervisor says `version` (its stamp changed: a build with another
    /// version string, without a rebuild); the other build products are linked beside it.
    static func build(version: String, in world: TestWorld) throws -> String {
        let folder = world.root + "/build-\(version)"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        for name in try FileManager.default.contentsOfDirectory(atPath: Build.dir) where name != "supervisor" {
            try? FileManager.default.createSymbolicLink(atPath: folder + "/" + name, withDestinationPath: Build.dir + "/" + name)
        }
        var bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: Build.supervisor)))
        let stamp = Array("@(#)sandboxed-plugins \(ProductVersion.current)".utf8)
        let replacement = Array("@(#)sandboxed-plugins \(version)".utf8)
        guard let at = bytes.firstRange(of: stamp) else { throw HarnessError("no version stamp in \(Build.supervisor)") }
        // Written over the stamp in place, which has room for a longer version (its array is 64
        // bytes, NUL-padded): the file keeps its size and layout.
        guard replacement.count < 64 else { throw HarnessError("version \(version) is too long for the stamp") }
        for (i, byte) in (replacement + [0]).enumerated() { bytes[at.lowerBound + i] = byte }
        let path = folder + "/supervisor"
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        chmod(path, 0o755)
        return path
    }

    final class Lanes: Sendable {
        let answered = Atomic<Int>(0)
        let failures = Mutex<[String]>([])
        let longestGapNs = Atomic<Int64>(0)
        let stop = Atomic<Bool>(false)
    }

    /// Four clients (two over direct links, two through the supervisor) each call in a loop and
    /// check their answers, while `work` runs; returns the failures and the longest gap (ms)
    /// between two answered calls of one client.
    static func callingClients(_ sup: RunningSupervisor, during work: () async throws -> Void) async throws -> (failures: [String], longestGapMs: Double) {
        let lanes = Lanes()
        var clients: [SupervisorClient] = []
        for lane in 0..<4 { clients.append(try await SupervisorClient.connect(socket: sup.socket, directLinks: lane < 2)) }
        defer { for c in clients { c.close() } }
        let tasks = clients.enumerated().map { lane, client in
            Task {
                var n = 0
                var last = ContinuousClock.now
                while !lanes.stop.load(ordering: .relaxed) {
                    n += 1
                    let sent = lane * 1_000_000 + n
                    do {
                        let got = try await client.call(lane % 2 == 0 ? "u.a" : "u.b", "echo", sent, as: Int.self, timeout: .seconds(20))
                        if got != sent { lanes.failures.withLock { $0.append("lane \(lane): sent \(sent), got \(got)") } }
                        let now = ContinuousClock.now
                        let gap = (now - last).components
                        let ns = gap.seconds * 1_000_000_000 + gap.attoseconds / 1_000_000_000
                        if ns > lanes.longestGapNs.load(ordering: .relaxed) { lanes.longestGapNs.store(ns, ordering: .relaxed) }
                        last = now
                        lanes.answered.add(1, ordering: .relaxed)
                    } catch {
                        lanes.failures.withLock { $0.append("lane \(lane): \(error)") }
                    }
                }
            }
        }
        // However this ends (a wait that times out throws), the callers stop: a caller whose
        // supervisor is gone would otherwise fail in a loop for ever.
        defer { lanes.stop.store(true, ordering: .relaxed) }
        try await waitUntil("calls to flow") { lanes.answered.load(ordering: .relaxed) > 200 }
        lanes.longestGapNs.store(0, ordering: .relaxed)
        try await work()
        let after = lanes.answered.load(ordering: .relaxed)
        try await waitUntil("calls to flow after it") { lanes.answered.load(ordering: .relaxed) > after + 200 }
        lanes.stop.store(true, ordering: .relaxed)
        for t in tasks { await t.value }
        return (lanes.failures.withLock { $0 }, Double(lanes.longestGapNs.load(ordering: .relaxed)) / 1e6)
    }

    /// Every running worker (`count` of them, standbys too when `standbys`) is the supervisor's
    /// child (its parent-death signal is tied to it), and a SIGKILL of the supervisor ends them all.
    static func expectWorkersEndWithIt(_ sup: RunningSupervisor, count: Int, standbys: Bool = false) throws {
        let pids = try sup.status().flatMap { [$0.pid] + (standbys ? [$0.standbyPid] : []) }.compactMap { $0 }
        #expect(pids.count == count)
        for pid in pids {
            let stat = try String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)
            let fields = stat[stat.range(of: ")")!.upperBound...].split(separator: " ")
            #expect(Int32(fields[1]) == sup.pid, "worker \(pid)'s parent is \(fields[1])")
        }
        sup.signal(SIGKILL)
        _ = try sup.waitForExit()
        try sup.waitUntil("every worker to end with the supervisor (exit)") { pids.allSatisfy { kill($0, 0) != 0 } }
    }

    static func workers(_ sup: RunningSupervisor) throws -> [String: (pid: Int32?, restarts: Int)] {
        Dictionary(uniqueKeysWithValues: try sup.status().map { ($0.identifier, ($0.pid, $0.restarts)) })
    }

    @Test("3 upgrades (to the same build, to a build with another version string, and back) while 4 clients call in a loop: no call fails, every worker keeps its pid and restart count, events, host methods and links carry on, status shows the new version")
    func upgradesUnderLoad() async throws {
        let w = try TestWorld()
        try w.bundle("u.a")
        try w.bundle("u.b", deps: [Dep("u.a")], extra: ["permissions": ["host.call:hostEcho"]])
        let sup = try RunningSupervisor(w)
        let next = try Self.build(version: "\(ProductVersion.current)-next", in: w)
        // A crash before the upgrades, so that a restart count is there to keep.
        let crashed = try #require(try sup.plugin("u.a").pid)
        kill(crashed, SIGKILL)
        try sup.waitUntil("u.a to restart") { try sup.plugin("u.a").state == "running" && sup.plugin("u.a").pid != crashed }
        // A client that follows events and provides a host method, on one connection throughout.
        let listener = try await SupervisorClient.connect(socket: sup.socket)
        defer { listener.close() }
        listener.method("hostEcho") { (value: Int) async throws -> Int in value }
        var events = try await listener.followEvents(plugin: "u.b").makeAsyncIterator()
        #expect(try await listener.call("u.b", "callHost", ClientTests.CallParams(target: "@host", method: "hostEcho", params: 7), as: Int.self) == 7)
        // u.b calls u.a over a peer link.
        #expect(try await listener.call("u.b", "pingVia", "u.a", as: Int.self) == 1)
        let before = try Self.workers(sup)
        // A library's descriptors opened without O_CLOEXEC (the event loops' epoll instances) are
        // not carried into the next binary, where nothing would use or close them.
        func epolls() throws -> Int {
            try FileManager.default.contentsOfDirectory(atPath: "/proc/\(sup.pid)/fd").count {
                (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(sup.pid)/fd/\($0)")) == "anon_inode:[eventpoll]"
            }
        }
        let epollsBefore = try epolls()
        let upgrader = try await SupervisorClient.connect(socket: sup.socket)
        defer { upgrader.close() }
        var outcomes: [UpgradeOutcome] = []
        let (failures, gapMs) = try await Self.callingClients(sup) {
            for binary in [Build.supervisor, next, Build.supervisor] {
                outcomes.append(try await upgrader.upgrade(binary: binary))
            }
        }
        #expect(failures.isEmpty, "failed calls: \(failures.prefix(5))")
        #expect(outcomes.map(\.to) == [ProductVersion.current, "\(ProductVersion.current)-next", ProductVersion.current])
        #expect(outcomes.map(\.from) == [ProductVersion.current, ProductVersion.current, "\(ProductVersion.current)-next"])
        #expect(outcomes.allSatisfy { $0.pid == sup.pid && $0.workers == 2 })
        print("upgrade pauses (ms): \(outcomes.map(\.pauseMs)); longest gap between answered calls of one client: \(gapMs) ms")
        #expect(gapMs < 2_000, "a client waited \(gapMs) ms for an answer")
        let after = try Self.workers(sup)
        #expect(try epolls() == epollsBefore, "an epoll instance was carried across an exec")
        #expect(after.mapValues(\.pid) == before.mapValues(\.pid))
        #expect(after.mapValues(\.restarts) == before.mapValues(\.restarts) && after["u.a"]?.restarts == 1)
        #expect(try sup.status().allSatisfy { $0.supervisorVersion == ProductVersion.current && $0.state == "running" })
        #expect(try sup.cli("status").out.contains("supervisor \(ProductVersion.current)"))
        // The same connection: the host method still answers, the event stream goes on.
        #expect(try await listener.call("u.b", "callHost", ClientTests.CallParams(target: "@host", method: "hostEcho", params: 9), as: Int.self) == 9)
        #expect(try await listener.call("u.b", "pingVia", "u.a", as: Int.self) == 1)
        #expect(try sup.plugin("u.b").links == ["u.a"])
        let bPID = try #require(after["u.b"]?.pid)
        kill(bPID, SIGSEGV)
        let exited = try await nextEvent(&events, "exited after the upgrades") { $0.event == .exited }
        #expect(exited.pid == bPID)
        _ = try await nextEvent(&events, "started") { $0.event == .started }
        // The workers are still the supervisor's children, and die with it: made by the thread
        // that execs, before and after the upgrades.
        try Self.expectWorkersEndWithIt(sup, count: 2)
    }

    @Test("a binary that is missing, not executable, of another architecture, that crashes when asked, or that crashes as it takes over: the old supervisor serves on, every plugin untouched; two upgrades at once: the second is refused; SIGUSR2 upgrades")
    func faultyBinaries() async throws {
        let w = try TestWorld()
        try w.bundle("u.a")
        let crashing = "\(ProductVersion.current)-crashing"
        let sup = try RunningSupervisor(w, environment: ["SP_TEST_CRASH_ON_TAKEOVER": crashing])
        let client = try await SupervisorClient.connect(socket: sup.socket)
        defer { client.close() }
        let before = try Self.workers(sup)
        func refusal(_ binary: String) async -> ErrorBody? {
            do {
                _ = try await client.upgrade(binary: binary)
                return nil
            } catch {
                return error as? ErrorBody
            }
        }
        let missing = await refusal(w.root + "/no-such-supervisor")
        #expect(missing?.code == "badRequest" && missing?.message.contains("does not exist") == true, "\(String(describing: missing))")
        let plain = w.root + "/not-executable"
        try FileManager.default.copyItem(atPath: Build.supervisor, toPath: plain)
        chmod(plain, 0o644)
        #expect(await refusal(plain)?.message.contains("not executable") == true)
        // An ELF header for another machine (AArch64 if this is x86-64, else x86-64).
        var header = [UInt8](repeating: 0, count: 64)
        header.replaceSubrange(0..<4, with: [0x7F, 0x45, 0x4C, 0x46])
        header[4] = 2; header[5] = 1; header[6] = 1
        #if arch(x86_64)
        header[18] = 183
        #else
        header[18] = 62
        #endif
        let foreign = w.root + "/foreign"
        try Data(header).write(to: URL(fileURLWithPath: foreign))
        chmod(foreign, 0o755)
        #expect(await refusal(foreign)?.message.contains("another architecture") == true)
        let script = w.root + "/script"
        try "#!/bin/sh\nexit 0\n".write(toFile: script, atomically: true, encoding: .utf8)
        chmod(script, 0o755)
        #expect(await refusal(script)?.message.contains("is not a supervisor that can take over") == true)
        let text = w.root + "/text"
        try "just text\n".write(toFile: text, atomically: true, encoding: .utf8)
        chmod(text, 0o755)
        #expect(await refusal(text)?.message.contains("neither an ELF binary nor a #! script") == true)
        // An ELF binary that crashes when asked.
        let segv = try Build.cProgram("segv", source: "#include <signal.h>\nint main(void) { raise(SIGSEGV); return 0; }\n")
        let crashed = await refusal(segv)
        #expect(crashed?.code == "unavailable" && crashed?.message.contains("crashed (SIGSEGV)") == true, "\(String(describing: crashed))")
        // A build that crashes as it takes over (after the exec): the rescue brings the old one back.
        let faulty = try Self.build(version: crashing, in: w)
        let rescued = await refusal(faulty)
        #expect(rescued?.code == "unavailable" && rescued?.message.contains("crashed (signal") == true, "\(String(describing: rescued))")
        #expect(try Self.workers(sup).mapValues(\.pid) == before.mapValues(\.pid))
        #expect(try sup.status().allSatisfy { $0.supervisorVersion == ProductVersion.current && $0.restarts == 0 })
        #expect(try await client.call("u.a", "ping", as: Int.self) == 1)
        // Two at once: one goes ahead, the other is refused.
        async let first = refusal(Build.supervisor)
        async let second = refusal(Build.supervisor)
        let both = await [first, second]
        #expect(both.compactMap { $0 }.count == 1 && both.compactMap { $0 }.first?.message.contains("another upgrade is under way") == true,
                "\(both)")
        // SIGUSR2: an upgrade to the path it was started from.
        let logged = sup.log.components(separatedBy: "upgraded from").count
        sup.signal(SIGUSR2)
        try sup.waitUntil("SIGUSR2's upgrade") { sup.log.components(separatedBy: "upgraded from").count > logged }
        #expect(try Self.workers(sup).mapValues(\.pid) == before.mapValues(\.pid))
        #expect(try await client.call("u.a", "ping", as: Int.self) == 1)
        // Bad requests: a relative path, params of the wrong shape; named, nothing changes.
        let relative = await refusal("supervisor")
        #expect(relative?.code == "badRequest" && relative?.message.contains("absolute path") == true, "\(String(describing: relative))")
        let odd = try rawControl(sup.socket)
        var frame = FrameBuilder(kind: .upgrade)
        frame.uint("id", 1)
        frame.raw("params", Array(#"{"binary":5}"#.utf8))
        try odd.sendFrame(frame.finish())
        let oddAnswer = String(decoding: try #require(try odd.receiveFrame()), as: UTF8.self)
        odd.close()
        #expect(oddAnswer.contains("badRequest") && oddAnswer.contains("upgrade's params"), "\(oddAnswer)")
        #expect(try Self.workers(sup).mapValues(\.pid) == before.mapValues(\.pid))
        // During a shutdown: refused with the reason (the stop and the upgrade on one connection,
        // read in that order).
        let raw = try rawControl(sup.socket)
        defer { raw.close() }
        for (id, kind) in [(UInt64(1), MessageKind.stop), (2, .upgrade)] {
            var frame = FrameBuilder(kind: kind)
            frame.uint("id", id)
            try raw.sendFrame(frame.finish())
        }
        var answers: [String] = []
        while answers.count < 2, let frame = try raw.receiveFrame() { answers.append(String(decoding: frame, as: UTF8.self)) }
        #expect(answers.count == 2 && answers[1].contains("the supervisor is shutting down"), "\(answers)")
        #expect(try sup.waitForExit() == 0)
    }

    @Test("upgrades while new clients keep connecting to call plugins that stop when idle (onCall and eager): a client that connects during the handover is handed over too, the new binary takes none before its plugins are as the snapshot left them; every call answered, no phase refused")
    func newClientsWaitForTheResume() async throws {
        let w = try TestWorld()
        let ids = ["v.lazy1", "v.lazy2", "v.lazy3", "v.eager"]
        for id in ids { try w.bundle(id, extra: ["idleStopMs": 120] .merging(id == "v.eager" ? [:] : ["activation": "onCall"]) { a, _ in a }) }
        let sup = try RunningSupervisor(w)
        let stop = Atomic<Bool>(false)
        let failures = Guarded<[String]>([])
        let answered = Atomic<Int>(0)
        let threads = (0..<4).map { lane in
            Thread {
                var n: UInt64 = 0
                while !stop.load(ordering: .relaxed) {
                    n += 1
                    do {
                        // A new connection each time: some are made while the exec is under way.
                        let connection = try BlockingConnection.connect(path: sup.socket)
                        defer { connection.close() }
                        // A connection no binary serves would wait for ever: 10 s is a failure.
                        var limit = timeval(tv_sec: 10, tv_usec: 0)
                        setsockopt(connection.fd, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
                        try connection.sendFrame(callFrame(id: n, target: ids[Int(n) % ids.count], method: "echo", params: "[\(n)]"))
                        let answer = try CrashReplayTests.read(connection)
                        if answer.result != "[\(n)]" { failures.withLock { $0.append("lane \(lane): \(answer)") } }
                        answered.add(1, ordering: .relaxed)
                    } catch {
                        if !stop.load(ordering: .relaxed) { failures.withLock { $0.append("lane \(lane): \(error)") } }
                    }
                }
            }
        }
        for t in threads { t.start() }
        defer { stop.store(true, ordering: .relaxed) }
        try await waitUntil("calls to flow") { answered.load(ordering: .relaxed) > 50 }
        let upgrader = try await SupervisorClient.connect(socket: sup.socket)
        defer { upgrader.close() }
        for _ in 0..<3 {
            _ = try await upgrader.upgrade()
            let after = answered.load(ordering: .relaxed)
            try await waitUntil("calls to flow after it") { answered.load(ordering: .relaxed) > after + 20 }
        }
        stop.store(true, ordering: .relaxed)
        #expect(failures.withLock { $0 }.isEmpty, "\(failures.withLock { $0.prefix(5) })")
        #expect(!sup.log.contains("internal error"), "\(sup.log.split(separator: "\n").filter { $0.contains("internal error") }.prefix(5))")
        for id in ids { #expect(try sup.plugin(id).restarts == 0, "\(id)") }
    }

    @Test("answers' memfds a client has not picked up are still its after an upgrade: withdrawn when it goes, not held for their tokens' 10 s")
    func offersKeepTheirClientAcrossAnUpgrade() async throws {
        let w = try TestWorld()
        try w.bundle("u.kit")
        let sup = try RunningSupervisor(w)
        let plain = try await SupervisorClient.connect(socket: sup.socket, directLinks: false)
        for _ in 0..<5 { _ = try await plain.callJSON("u.kit", "bytes", params: Array(#"{"size":200000}"#.utf8)) }
        let upgrader = try await SupervisorClient.connect(socket: sup.socket)
        _ = try await upgrader.upgrade()
        upgrader.close()
        let held = try openFDs(sup.pid)
        plain.close()
        try sup.waitUntil(timeout: 3, "the 5 memfds withdrawn") { try openFDs(sup.pid) <= held - 5 }
    }

    @Test("a client that had sent part of a frame (its length read, not all its body) when the upgrade came is answered once it sends the rest")
    func aFrameCutByTheUpgrade() async throws {
        let w = try TestWorld()
        try w.bundle("u.kit")
        let sup = try RunningSupervisor(w)
        let conn = try rawControl(sup.socket)
        defer { conn.close() }
        // A whole request first: once answered, the supervisor has read all that was before it.
        try conn.sendFrame(callFrame(id: 1, target: "u.kit", method: "echo", params: "[1]"))
        #expect(try CrashReplayTests.read(conn).result == "[1]")
        let frame = callFrame(id: 2, target: "u.kit", method: "echo", params: "[2]")
        _ = frame.prefix(10).withUnsafeBytes { send(conn.fd, $0.baseAddress, $0.count, 0) }
        // (A round trip on another connection: the 10 bytes were read meanwhile.)
        #expect(try sup.cli("status").code == 0)
        let upgrader = try await SupervisorClient.connect(socket: sup.socket)
        defer { upgrader.close() }
        _ = try await upgrader.upgrade()
        _ = frame.dropFirst(10).withUnsafeBytes { send(conn.fd, $0.baseAddress, $0.count, 0) }
        let answer = try CrashReplayTests.read(conn)
        #expect(answer.id == 2 && answer.result == "[2]", "\(answer)")
    }

    @Test("an upgrade while a control client reads none of the answers queued for it: refused within seconds with why, and the others are served meanwhile and after")
    func anUpgradeDoesNotWaitForANonReader() async throws {
        let w = try TestWorld()
        try w.bundle("u.kit")
        let sup = try RunningSupervisor(w)
        let stuck = try rawControl(sup.socket)
        defer { stuck.close() }
        for i in 1...20 {
            try stuck.sendFrame(callFrame(id: UInt64(i), target: "u.kit", method: "text", params: #"{"size":1000000,"ms":0}"#))
        }
        // Its answers fill its socket and wait in the supervisor (it reads none).
        let stuckAnswers = try sup.waitFor("the answers to wait for it") { () -> Int? in
            let metrics = try Prometheus(sup.cli("metrics").out)
            let n = metrics["plugin_calls_total", ["plugin": "u.kit", "outcome": "ok"]] ?? 0
            return n >= 20 ? Int(n) : nil
        }
        #expect(stuckAnswers >= 20)
        let started = ContinuousClock.now
        let upgrade = try sup.cli("upgrade")
        #expect(upgrade.code != 0 && upgrade.err.contains("did not go out within 2 s"), "\(upgrade.out)\(upgrade.err)")
        #expect(ContinuousClock.now - started < .seconds(10))
        #expect(try sup.cli("status").code == 0)
        #expect(try sup.call("u.kit", "echo", "[3]", as: [Int].self) == [3])
    }

    @Test("with standbyWorkers always: the kept standbys end before the handover (they are not handed over) and the new binary keeps its own; a crash after it takes one")
    func keptStandbysAcrossAnUpgrade() async throws {
        let w = try TestWorld()
        try w.bundle("u.a")
        try w.bundle("u.b")
        let config = w.root + "/standbys.json"
        try #"{"standbyWorkers": "always"}"#.write(toFile: config, atomically: true, encoding: .utf8)
        let sup = try RunningSupervisor(w, args: ["--config", config])
        try sup.waitUntil("a standby beside each plugin") { try sup.status().allSatisfy { $0.standbyPid != nil } }
        let before = try sup.status()
        let client = try await SupervisorClient.connect(socket: sup.socket)
        defer { client.close() }
        let outcome = try await client.upgrade()
        #expect(outcome.workers == 2)
        try sup.waitUntil("the new binary's standbys") {
            let now = try sup.status()
            return now.allSatisfy { p in p.standbyPid != nil && !before.contains { $0.standbyPid == p.standbyPid } }
        }
        let after = try sup.status()
        #expect(after.map(\.pid) == before.map(\.pid), "a serving worker changed")
        for old in before.compactMap(\.standbyPid) { try sup.waitUntil("standby \(old) gone") { kill(old, 0) != 0 || isZombie(old) } }
        let standby = try #require(after.first { $0.identifier == "u.b" }?.standbyPid)
        let crashed = try #require(after.first { $0.identifier == "u.b" }?.pid)
        kill(crashed, SIGKILL)
        try sup.waitUntil("u.b to restart") { let p = try sup.plugin("u.b"); return p.state == "running" && p.pid != crashed }
        #expect(try sup.plugin("u.b").pid == standby)
        #expect(try await client.call("u.b", "ping", as: Int.self) == 1)
        // Its standby, made by the new binary after the crash, ends with the supervisor too.
        try sup.waitUntil("a standby for u.b again") { try sup.plugin("u.b").standbyPid != nil }
        try Self.expectWorkersEndWithIt(sup, count: 4, standbys: true)
    }

    @Test("after an upgrade, a worker the new binary starts (a restart, after each of two upgrades) gets a control group of its own, never the one an adopted worker has or had: its cgroup layer is there")
    func ownGroupsAfterAnUpgrade() async throws {
        let w = try TestWorld()
        try w.bundle("u.s")
        let sup = try RunningSupervisor(w)
        let before = try sup.plugin("u.s")
        let client = try await SupervisorClient.connect(socket: sup.socket)
        defer { client.close() }
        _ = try await client.upgrade()
        #expect(try sup.cli("restart", "u.s").code == 0)
        let after = try sup.waitFor("u.s running again") { () -> PluginStatus? in
            let p = try sup.plugin("u.s")
            return p.state == "running" && p.pid != before.pid ? p : nil
        }
        #expect(after.sandbox.contains("cgroup") == before.sandbox.contains("cgroup"), "\(after.sandbox)")
        #expect(!(after.sandboxMissing ?? []).contains { $0.hasPrefix("cgroup") }, "\(after.sandboxMissing ?? [])")
        // A second upgrade, and a restart again: the new worker is in a group of its own.
        _ = try await client.upgrade()
        let adopted = try #require(try sup.plugin("u.s").pid)
        #expect(try sup.cli("restart", "u.s").code == 0)
        let next = try sup.waitFor("u.s running again") { () -> Int32? in
            let p = try sup.plugin("u.s")
            return p.state == "running" && p.pid != adopted ? p.pid : nil
        }
        #expect(!(try sup.plugin("u.s").sandboxMissing ?? []).contains { $0.hasPrefix("cgroup") })
        func groups(_ pid: Int32) -> Set<String> {
            let text = (try? String(contentsOfFile: "/proc/\(pid)/cgroup", encoding: .utf8)) ?? ""
            return Set(text.split(separator: "\n").compactMap { $0.split(separator: ":", maxSplits: 2).last.map(String.init) }.filter { $0.contains("sandboxed-plugins-") })
        }
        if before.sandbox.contains("cgroup") { #expect(!groups(next).isEmpty, "the new worker is in no group of the supervisor's") }
    }

    @Test("with exec'd workers (no fork server): a worker exec'd before the upgrade and one exec'd after it (a crash's restart) are both the supervisor's children, and both end with it")
    func execdWorkersAcrossAnUpgrade() async throws {
        let w = try TestWorld()
        try w.bundle("u.a")
        try w.bundle("u.b")
        let sup = try RunningSupervisor(w, start: .exec)
        let client = try await SupervisorClient.connect(socket: sup.socket)
        defer { client.close() }
        _ = try await client.upgrade()
        let crashed = try #require(try sup.plugin("u.b").pid)
        kill(crashed, SIGKILL)
        try sup.waitUntil("u.b to restart") { let p = try sup.plugin("u.b"); return p.state == "running" && p.pid != crashed }
        _ = try await client.upgrade()
        #expect(try await client.call("u.b", "ping", as: Int.self) == 1)
        #expect(try sup.status().allSatisfy { $0.workerStart == "exec" })
        try Self.expectWorkersEndWithIt(sup, count: 2)
    }

    @Test("a wrapper script that execs the supervisor, and a supervisor binary copied alone (no worker, fork server or installer beside it) take over; a crash after it restarts with the previous binary's worker")
    func wrappersAndLoneCopies() async throws {
        let w = try TestWorld()
        try w.bundle("u.a")
        let sup = try RunningSupervisor(w)
        let client = try await SupervisorClient.connect(socket: sup.socket)
        defer { client.close() }
        let wrapper = w.root + "/wrapper"
        try "#!/bin/sh\nexec '\(Build.supervisor)' \"$@\"\n".write(toFile: wrapper, atomically: true, encoding: .utf8)
        chmod(wrapper, 0o755)
        #expect(try await client.upgrade(binary: wrapper).workers == 1)
        let alone = w.root + "/alone"
        try FileManager.default.createDirectory(atPath: alone, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: Build.supervisor, toPath: alone + "/supervisor")
        #expect(try await client.upgrade(binary: alone + "/supervisor").workers == 1)
        try sup.waitUntil("the log to say which companions it took") { sup.log.contains("this binary has no worker") }
        let pid = try #require(try sup.plugin("u.a").pid)
        kill(pid, SIGSEGV)
        try sup.waitUntil("u.a to restart") { let p = try sup.plugin("u.a"); return p.state == "running" && p.pid != pid }
        #expect(try await client.call("u.a", "ping", as: Int.self) == 1)
        #expect(try sup.plugin("u.a").restarts == 1)
    }

    @Test("a wrapper that runs the supervisor when asked `upgrade-probe` but not with the supervisor's own arguments (it exits, or runs something else): refused before the exec, the old supervisor serves on", arguments: ["exit 1", "exec sleep 30"])
    func aWrapperThatRunsTheSupervisorOnlyForTheProbe(_ otherwise: String) async throws {
        let w = try TestWorld()
        try w.bundle("u.a")
        let sup = try RunningSupervisor(w)
        let pid = try #require(try sup.plugin("u.a").pid)
        let wrapper = w.root + "/two-faced"
        try "#!/bin/sh\nif [ \"$1\" = upgrade-probe ]; then exec '\(Build.supervisor)' \"$@\"; fi\n\(otherwise)\n".write(toFile: wrapper, atomically: true, encoding: .utf8)
        chmod(wrapper, 0o755)
        let r = try sup.cli("upgrade", "--binary", wrapper)
        #expect(r.code != 0 && r.err.contains("as the exec will run it"), "\(r.out)\(r.err)")
        #expect(try sup.plugin("u.a").pid == pid)
        #expect(try sup.call("u.a", "ping", as: Int.self) == 1)
        #expect(sup.process.isRunning)
    }

    @Test("a binary whose probe hangs is refused after 5 s, and what the probe started goes with it")
    func aHungProbeLeavesNothingBehind() throws {
        let w = try TestWorld()
        try w.bundle("u.a")
        let sup = try RunningSupervisor(w)
        let marker = "97.\(Int.random(in: 100...999))"
        let wrapper = w.root + "/hangs"
        try "#!/bin/sh\nsleep \(marker)\n".write(toFile: wrapper, atomically: true, encoding: .utf8)
        chmod(wrapper, 0o755)
        let r = try sup.cli("upgrade", "--binary", wrapper)
        #expect(r.code != 0 && r.err.contains("did not answer `upgrade-probe` within 5 s"), "\(r.out)\(r.err)")
        let left = try Shell.run("/usr/bin/pgrep", ["-f", "sleep \(marker)"])
        #expect(left.out.isEmpty, "left behind: \(left.out)")
        #expect(try sup.call("u.a", "ping", as: Int.self) == 1)
    }

    @Test("an upgrade while a crashed plugin waits for its restart's backoff: the new binary restarts it when the delay ends, not at once")
    func theBackoffGoesOnAcrossAnUpgrade() async throws {
        let w = try TestWorld()
        try w.bundle("u.crashy")
        let config = try w.config(#"{"restartBackoffBaseMs": 3000, "restartBackoffMaxMs": 3000}"#)
        let sup = try RunningSupervisor(w, args: ["--config", config])
        let first = try #require(try sup.plugin("u.crashy").pid)
        kill(first, SIGSEGV)
        try sup.waitUntil("the first restart, at once") { let p = try sup.plugin("u.crashy"); return p.state == "running" && p.pid != first }
        let second = try #require(try sup.plugin("u.crashy").pid)
        let crashed = Date()
        kill(second, SIGSEGV)
        try sup.waitUntil("the second restart to wait for its delay") { try sup.plugin("u.crashy").state == "restarting" }
        let client = try await SupervisorClient.connect(socket: sup.socket)
        defer { client.close() }
        _ = try await client.upgrade()
        try sup.waitUntil(timeout: 15, "the restart once its delay has passed") { try sup.plugin("u.crashy").state == "running" }
        #expect(Date().timeIntervalSince(crashed) >= 1.5, "restarted \(Date().timeIntervalSince(crashed)) s after the crash")
        #expect(try sup.plugin("u.crashy").restarts == 2)
    }

    @Test("`supervisor start` with a stray or forged SP_UPGRADE_SNAPSHOT in its environment: it says what is wrong with it and exits 1, and starts nothing")
    func strayHandoverVariable() throws {
        let w = try TestWorld()
        try w.bundle("u.a")
        for (value, why) in [("garbage", "does not name two descriptors"), ("900:901", "cannot read the snapshot (descriptor 900)")] {
            let r = try Shell.run(Build.supervisor, ["start", "--home", w.home, "--plugins", w.plugins],
                                  env: ProcessInfo.processInfo.environment.merging(["SP_UPGRADE_SNAPSHOT": value]) { _, new in new }, timeout: 30)
            #expect(r.code == 1 && r.err.contains(why), "\(value): exit \(r.code), \(r.err)")
            #expect(!r.out.contains("ready"))
        }
    }
}
