import Foundation
import IPC
import PluginProtocol
import Protocol
import SupervisorClient
import Testing

/// SPEC §15 across `supervisor upgrade`, with a worker whose plugin put something else where the
/// worker keeps its taken page's descriptor (plugin code shares its worker's descriptors): what the
/// worker sends when the new binary asks for its page is refused with the reason, the safe side
/// holds (every call it holds at its crash counts as started: none is replayed, none runs twice),
/// and its next worker has a page of its own again.
extension CrashReplayTests {
    @Test("a worker that sends something else than its taken page after an upgrade: refused with the reason; at its crash its calls count as started, none runs; its next worker replays again",
          arguments: [("pipe", "what it sent is not its page"), ("file", "what it sent is not its page"), ("closed", "it had none to send")])
    func takenPageRefusedAfterAnUpgrade(kind: String, reason: String) async throws {
        let w = try TestWorld()
        try w.bundle("r.serial")
        try w.bundle("r.other")
        let sv = try RunningSupervisor(w)
        #expect(try sv.call("r.serial", "swapTakenPage", "\"\(kind)\"", as: Int32.self) > 2)
        let pid = try sv.plugin("r.serial").pid
        let client = try await SupervisorClient.connect(socket: sv.socket)
        defer { client.close() }
        #expect(try await client.upgrade().workers == 2)
        #expect(try sv.plugin("r.serial").pid == pid, "the worker was taken over, not restarted")
        try sv.waitUntil("the refusal logged") { sv.log.contains("r.serial: the worker taken over in the upgrade did not give its taken page back (\(reason)") }
        #expect(!sv.log.contains("r.other: the worker taken over"), "\(sv.log)")

        let connection = try Self.slowCallThenWaiting(64, in: "r.serial", w, sv)
        defer { connection.close() }
        kill(try #require(pid), SIGKILL)
        var answers: [UInt64: Answer] = [:]
        while answers.count < 65 {
            let answer = try Self.read(connection)
            #expect(answers[answer.id] == nil, "answered twice: \(answer.id)")
            answers[answer.id] = answer
        }
        for (id, answer) in answers {
            #expect(answer.error?.code == "unavailable" && answer.error?.started == true, "call \(id): \(String(describing: answer.error))")
        }
        #expect(try Self.ran(sv, "r.serial").isEmpty, "a call of a worker whose page was refused ran")
        #expect(try sv.plugin("r.serial").restarts == 1)
        #expect(try Self.ran(sv, "r.other").isEmpty, "the other plugin answers")
        // Its next worker was started by this binary, with a page of its own.
        try Self.expectWaitingCallsReplayed(in: "r.serial", w, sv, restarts: 1)
    }
}
