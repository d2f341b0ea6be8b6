import Foundation
import PluginProtocol
@testable import PluginSDK
import Testing

/// Async methods' calls run on kept tasks (`CallTask`): one task runs call after call, so nothing of
/// one call may reach the next (a late `cancel`, its trace), a cancelled call's task is not kept,
/// and a burst leaves at most the pool's limit waiting. Driven through a PluginRuntime as
/// `InlineMethodTests` does (a recording host, deliveries from threads of the test's own).
@Suite(.serialized) struct CallTaskTests {
    typealias Wire = InlineMethodTests.Wire

    func started(_ wire: Wire) throws -> PluginRuntime { try InlineMethodTests.started(wire) }

    /// Waits (up to 10 s) for `condition`.
    func waitUntil(_ what: String, _ condition: () -> Bool) throws {
        let deadline = Date().addingTimeInterval(10)
        while !condition() {
            guard Date() < deadline else { throw InlineMethodTests.HarnessFailure("\(what) never happened") }
            usleep(1000)
        }
    }

    /// Calls `task` (a relay to b) with `n` as call `id` and answers its call to b; returns the
    /// reply's result.
    func relay(_ wire: Wire, _ runtime: PluginRuntime, id: UInt64, _ n: Int) throws -> String {
        wire.deliver(runtime, #"{"type":"call","id":\#(id),"method":"task","params":\#(n)}"#)
        let (_, out) = try InlineMethodTests.outgoing(wire, n)
        wire.deliver(runtime, #"{"type":"reply","id":\#(out.id!),"result":\#(n)}"#)
        return try result(wire, id)
    }

    func result(_ wire: Wire, _ id: UInt64) throws -> String {
        let (sent, env) = try wire.wait("the reply to \(id)") { env, _ in env.kind == .reply && env.id == id }
        return sent.frame.withUnsafeBytes { raw in
            env.result.map { String(decoding: raw[$0], as: UTF8.self) } ?? env.error.map { String(decoding: raw[$0], as: UTF8.self) } ?? ""
        }
    }

    func replies(_ wire: Wire, _ id: UInt64) -> Int {
        wire.frames.filter { $0.frame.withUnsafeBytes { raw in (try? Envelope.parse(raw)).map { $0.kind == .reply && $0.id == id } ?? false } }.count
    }

    @Test("calls one after another run on one kept task: a late cancel of a finished call does not reach the next, and a call's trace is not seen by the next")
    func oneTaskCallAfterCall() async throws {
        try await InlineMethodTests.onOwnThread { try self.oneTaskCallAfterCallBody() }
    }

    func oneTaskCallAfterCallBody() throws {
        let wire = Wire()
        let runtime = try started(wire)
        #expect(try relay(wire, runtime, id: 10, 1) == "2")
        try waitUntil("the task's return to the pool") { runtime.callTasks.waiting == 1 }
        // The supervisor's cancel crossing the reply: it must not reach the call the task runs next.
        wire.deliver(runtime, #"{"type":"cancel","id":10}"#)
        wire.deliver(runtime, #"{"type":"call","id":11,"method":"cancelled"}"#)
        #expect(try result(wire, 11) == "false", "the late cancel of call 10 reached call 11")
        #expect(try relay(wire, runtime, id: 12, 5) == "6")

        let trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        wire.deliver(runtime, #"{"type":"call","id":13,"method":"trace","traceparent":"\#(trace)"}"#)
        #expect(try result(wire, 13) == "\"\(trace)\"")
        wire.deliver(runtime, #"{"type":"call","id":14,"method":"trace"}"#)
        #expect(try result(wire, 14) == "\"none\"", "call 13's trace was still bound for call 14")
        try waitUntil("call 14's end") { runtime.runningCalls == 0 && runtime.callTasks.waiting > 0 }
        #expect(runtime.callTasks.waiting == 1, "one call at a time needs one kept task")
        runtime.shutdown()
        #expect(runtime.callTasks.waiting == 0)
    }

    @Test("a call cancelled while it runs is not answered, its task is not kept, and the next call runs uncancelled")
    func cancelledCallsTaskIsNotKept() async throws {
        try await InlineMethodTests.onOwnThread { try self.cancelledCallsTaskIsNotKeptBody() }
    }

    func cancelledCallsTaskIsNotKeptBody() throws {
        let wire = Wire()
        let runtime = try started(wire)
        #expect(try relay(wire, runtime, id: 20, 1) == "2")
        try waitUntil("the task's return to the pool") { runtime.callTasks.waiting == 1 }
        // Call 21 takes the kept task; it is cancelled while it waits for b.
        wire.deliver(runtime, #"{"type":"call","id":21,"method":"task","params":7}"#)
        let (_, out) = try InlineMethodTests.outgoing(wire, 7)
        #expect(runtime.callTasks.waiting == 0)
        wire.deliver(runtime, #"{"type":"cancel","id":21}"#)
        wire.deliver(runtime, #"{"type":"reply","id":\#(out.id!),"result":7}"#)
        // Its task ends once the call is settled (answered or not): then nothing more can come of it.
        try waitUntil("call 21's task's end") { runtime.keptTaskCount == 0 }
        #expect(replies(wire, 21) == 0, "a cancelled call was answered (the supervisor already answered it)")
        #expect(runtime.callTasks.waiting == 0, "the cancelled call's task was kept")
        wire.deliver(runtime, #"{"type":"call","id":22,"method":"cancelled"}"#)
        #expect(try result(wire, 22) == "false")
        runtime.shutdown()
    }

    @Test("200 overlapping calls are each answered once; at most the pool's limit of tasks waits afterwards, and none after a memoryWarning")
    func burstLeavesAtMostTheLimit() async throws {
        try await InlineMethodTests.onOwnThread { try self.burstLeavesAtMostTheLimitBody() }
    }

    func burstLeavesAtMostTheLimitBody() throws {
        let wire = Wire()
        let runtime = try started(wire)
        let count = 200
        var outgoing: [UInt64] = []
        for n in 0..<count {
            wire.deliver(runtime, #"{"type":"call","id":\#(1000 + n),"method":"task","params":\#(n)}"#)
        }
        // All 200 wait for b at once: 200 tasks.
        for n in 0..<count {
            let (_, env) = try InlineMethodTests.outgoing(wire, n)
            outgoing.append(env.id!)
        }
        for (n, id) in outgoing.enumerated() {
            wire.deliver(runtime, #"{"type":"reply","id":\#(id),"result":\#(n)}"#)
        }
        for n in 0..<count {
            #expect(try result(wire, UInt64(1000 + n)) == "\(n + 1)")
        }
        try waitUntil("every call's end") { runtime.runningCalls == 0 }
        try waitUntil("the pool filled") { runtime.callTasks.waiting == runtime.callTasks.limit }
        #expect(replies(wire, 1000) == 1 && replies(wire, 1199) == 1)
        // Kept tasks serve the next burst.
        #expect(try relay(wire, runtime, id: 2000, 5000) == "5001")
        try waitUntil("the task's return to the pool") { runtime.callTasks.waiting == runtime.callTasks.limit }
        // A memoryWarning lets them go; calls after it make and keep tasks again.
        wire.deliver(runtime, #"{"type":"event","id":2001,"name":"memoryWarning"}"#)
        _ = try wire.wait("memoryWarning's reply") { env, _ in env.kind == .reply && env.id == 2001 }
        #expect(runtime.callTasks.waiting == 0)
        #expect(try relay(wire, runtime, id: 2002, 5002) == "5003")
        try waitUntil("the task's return to the pool") { runtime.callTasks.waiting == 1 }
        runtime.shutdown()
        #expect(runtime.callTasks.waiting == 0)
    }
}

/// `CallTask`'s moves alone, on a task that records what it sees: a cancel reaches the turn it
/// names and no other, whether the call runs, was handed and not yet started, or is over.
@Suite struct CallTaskStateTests {
    /// What the kept task saw of each call it was handed: the call's id and whether it was cancelled.
    /// `Guarded`, not `Mutex`: the thread sanitizer does not see `Mutex`'s contended path (see
    /// `Guarded`) and would report these as raced.
    final class Seen: Sendable {
        let calls = Guarded<[(id: UInt64, cancelled: Bool)]>([])
        let ended = Guarded(false)
        /// Where a task held before its first park waits (`handedBeforeParkAndRetire`).
        let gate = Guarded<CheckedContinuation<Void, Never>?>(nil)
    }

    func call(_ id: UInt64) -> CallTask.Call { CallTask.Call(id: id, trace: nil, attached: nil, work: ClosureCall { 0 }) }

    /// A kept task that ends its first turn at once, then records each call handed to it until
    /// one comes cancelled (it then ends, as `serve` does). `holding`: that call's turn does not
    /// end until the test opens `seen.gate`.
    func keptTask(_ seen: Seen, holding: UInt64? = nil) -> CallTask {
        CallTask.start { slot in
            Task {
                while slot.endTurn(), let next = await slot.park() {
                    seen.calls.withLock { $0.append((next.id, Task.isCancelled)) }
                    if next.id == holding { await withCheckedContinuation { c in seen.gate.withLock { $0 = c } } }
                }
                seen.ended.withLock { $0 = true }
            }
        }
    }

    func waitUntil(_ what: String, _ condition: () -> Bool) async throws {
        let deadline = ContinuousClock.now + .seconds(10)
        while !condition() {
            guard ContinuousClock.now < deadline else { throw InlineMethodTests.HarnessFailure("\(what) never happened") }
            try await Task.sleep(for: .milliseconds(1))
        }
    }

    @Test("a cancel of a turn that is over reaches nothing; one of the turn handed, before or while it runs, cancels that call and ends the task after it")
    func cancelReachesOnlyItsTurn() async throws {
        let seen = Seen()
        // Call 2's turn lasts until its cancel is sent: a cancel after the turn ended would be one
        // that crossed its reply (as turn 0's), which reaches nothing.
        let slot = keptTask(seen, holding: 2)
        try await waitUntil("the first park") { slot.isParked }
        slot.cancel(turn: 0)  // turn 0 is over: the supervisor's cancel crossed its reply
        let turn1 = try #require(slot.hand(call(1)))
        #expect(turn1 == 1)
        try await waitUntil("call 1 seen") { seen.calls.withLock { $0.count } == 1 }
        try await waitUntil("the second park") { slot.isParked }
        #expect(seen.calls.withLock { $0[0].cancelled } == false, "the cancel of turn 0 reached call 1")

        let turn2 = try #require(slot.hand(call(2)))
        slot.cancel(turn: turn2)  // before or while call 2 runs: either way it is call 2's
        try await waitUntil("call 2 held") { seen.gate.withLock { $0 != nil } }
        seen.gate.withLock { $0!.resume() }
        // The task ends at call 2's turn: the cancel reached it, before it started (it saw itself
        // cancelled) or while it ran (after it noted what it saw), as the scheduler had it.
        try await waitUntil("the task's end") { seen.ended.withLock { $0 } }
        let calls = seen.calls.withLock { $0 }
        #expect(calls.count == 2 && calls[1].id == 2)
        #expect(slot.hand(call(3)) == nil, "a task whose call was cancelled took another")
    }

    @Test("a call handed before the task parks is run when it does; retire ends a parked task, and a retired one takes no call")
    func handedBeforeParkAndRetire() async throws {
        let seen = Seen()
        let slot = CallTask.start { slot in
            Task {
                // Held before its first park, so the call below is handed while it runs.
                await withCheckedContinuation { c in seen.gate.withLock { $0 = c } }
                while slot.endTurn(), let next = await slot.park() {
                    seen.calls.withLock { $0.append((next.id, Task.isCancelled)) }
                }
                seen.ended.withLock { $0 = true }
            }
        }
        try await waitUntil("the task held") { seen.gate.withLock { $0 != nil } }
        #expect(slot.hand(call(5)) == 0)  // its turn is still 0: the first has not ended
        seen.gate.withLock { $0!.resume() }
        try await waitUntil("call 5 seen") { seen.calls.withLock { $0.count } == 1 }
        try await waitUntil("the next park") { slot.isParked }
        slot.retire()
        try await waitUntil("the task's end") { seen.ended.withLock { $0 } }
        #expect(slot.hand(call(6)) == nil)
        #expect(seen.calls.withLock { $0.map(\.id) } == [5])
    }
}
