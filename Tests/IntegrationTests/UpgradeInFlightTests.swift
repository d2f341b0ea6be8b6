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
}

