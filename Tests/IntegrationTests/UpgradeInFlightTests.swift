import Foundation
import PluginProtocol
import Synchronization
import SupervisorClient
import Testing

/// SPEC §14: "calls in flight are answered". An upgrade asked while a call is inside a worker waits
/// for its answer (up to the call's deadline, at most 20 s), then hands over; the call is answered
/// and the upgrade goes through.
extension UpgradeTests {
    @Test("an upgrade asked while a 3 s call (longer than the 2 s the supervisor waits for anything else) is in flight through the supervisor waits for its answer, then goes through: the call is answered, the worker kept")
    func upgradeWaitsForACallInFlight() async throws {
        let w = try TestWorld()
        try w.bundle("u.slow")
        let sv = try RunningSupervisor(w)
        let pid = try sv.plugin("u.slow").pid
        let socket = sv.socket
        let answer = Guarded<Shell.Result?>(nil)
        let caller = Thread {
            answer.withLock { $0 = try? Shell.run(Build.supervisor, ["call", "--socket", socket, "u.slow", "block", #"{"ms":3000}"#]) }
        }
        caller.start()
        try sv.waitUntil("the call to be inside the worker") { FileManager.default.fileExists(atPath: w.home + "/data/u.slow/blocking") }
        let client = try await SupervisorClient.connect(socket: sv.socket)
        defer { client.close() }
        let outcome = try await client.upgrade()
        #expect(outcome.workers == 1)
        try sv.waitUntil("the call's answer") { answer.withLock { $0 != nil } }
        let r = try #require(answer.withLock { $0 })
        #expect(r.code == 0 && r.out.contains("3000"), "\(r.out)\(r.err)")
        #expect(try sv.plugin("u.slow").pid == pid, "the worker was taken over, not restarted")
        #expect(sv.log.contains("waiting for the calls in flight"))
    }

    @Test("a SIGTERM while an upgrade waits for a call in flight: the upgrade is answered at once that the supervisor is shutting down, the call is answered, and the supervisor stops with exit code 0")
    func aShutdownGivesUpAWaitingUpgrade() throws {
        let w = try TestWorld()
        try w.bundle("u.slow")
        let sv = try RunningSupervisor(w)
        let socket = sv.socket
        let call = Guarded<Shell.Result?>(nil), upgrade = Guarded<Shell.Result?>(nil)
        Thread { call.withLock { $0 = try? Shell.run(Build.supervisor, ["call", "--socket", socket, "u.slow", "block", #"{"ms":3000}"#]) } }.start()
        try sv.waitUntil("the call to be inside the worker") { FileManager.default.fileExists(atPath: w.home + "/data/u.slow/blocking") }
        Thread { upgrade.withLock { $0 = try? Shell.run(Build.supervisor, ["upgrade", "--socket", socket]) } }.start()
        try sv.waitUntil("the upgrade to wait") { sv.log.contains("waiting for the calls in flight") }
        let sent = Date()
        sv.signal(SIGTERM)
        try sv.waitUntil("the upgrade's answer") { upgrade.withLock { $0 != nil } }
        let answered = Date().timeIntervalSince(sent)
        let u = try #require(upgrade.withLock { $0 })
        #expect(u.code != 0 && u.err.contains("no upgrade: the supervisor is shutting down"), "\(u.out)\(u.err)")
        #expect(answered < 2, "answered \(answered) s after the SIGTERM")
        try sv.waitUntil("the call's answer") { call.withLock { $0 != nil } }
        #expect(try sv.waitForExit() == 0)
        #expect(!sv.log.contains("upgraded from"))
    }

    @Test("an upgrade asked while a stream through the supervisor runs past its first credit: the client's credit is read while the upgrade waits for quiet, the stream ends with every row and no stall, and the upgrade goes through")
    func aStreamEndsWhileTheUpgradeWaits() async throws {
        let w = try TestWorld()
        try w.bundle("u.rows")
        let sv = try RunningSupervisor(w)
        // Through the supervisor (no direct link): its credit comes on the control socket.
        let reader = try await SupervisorClient.connect(socket: sv.socket, directLinks: false)
        defer { reader.close() }
        let rows = Guarded<[Date]>([])
        let stream = Task {
            for try await _ in reader.stream("u.rows", "rows", ["count": 60, "delayMs": 10], as: StreamTests.Row.self) {
                rows.withLock { $0.append(Date()) }
            }
        }
        try sv.waitUntil("the stream to begin") { rows.withLock { $0.count >= 5 } }
        let client = try await SupervisorClient.connect(socket: sv.socket)
        defer { client.close() }
        let outcome = try await client.upgrade()
        #expect(outcome.workers == 1)
        try await stream.value
        let times = rows.withLock { $0 }
        #expect(times.count == 60)
        let longest = zip(times, times.dropFirst()).map { $1.timeIntervalSince($0) }.max() ?? 0
        #expect(longest < 1, "the stream stood still for \(longest) s")
    }

    @Test("a SIGTERM that comes after the snapshot was taken, just before the exec, is not lost: the next binary takes over, then stops, exit code 0")
    func aSignalAtTheExecReachesTheNextBinary() async throws {
        let w = try TestWorld()
        try w.bundle("u.a")
        let sv = try RunningSupervisor(w, environment: ["SP_TEST_SIGNAL_AT_HANDOVER": "\(SIGTERM)"])
        let client = try await SupervisorClient.connect(socket: sv.socket)
        defer { client.close() }
        _ = try? await client.upgrade()
        #expect(try sv.waitForExit() == 0)
        #expect(sv.log.contains("upgraded from"), "\(sv.log)")
        #expect(sv.log.contains("shutting down") || sv.log.contains("SIGTERM"), "\(sv.log)")
    }

    @Test("an upgrade does not restart a plugin's idle time: a plugin with idleStopMs 2000, called once, upgraded 1.2 s later, is stopped about 2 s after its call, not 2 s after the upgrade")
    func anUpgradeKeepsTheIdleTime() async throws {
        let w = try TestWorld()
        try w.bundle("u.idle", extra: ["activation": "onCall", "idleStopMs": 2000])
        let sv = try RunningSupervisor(w)
        let client = try await SupervisorClient.connect(socket: sv.socket, directLinks: false)
        defer { client.close() }
        #expect(try await client.call("u.idle", "ping", as: Int.self) == 1)
        let called = Date()
        try await Task.sleep(for: .milliseconds(1200))
        _ = try await client.upgrade()
        try sv.waitUntil("u.idle idle-stopped") { try sv.plugin("u.idle").state == "inactive" }
        let after = Date().timeIntervalSince(called)
        #expect(after < 2.9, "stopped \(after) s after its call")
    }
}
