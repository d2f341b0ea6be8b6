import Testing
import SupervisorCore

/// The requests waiting for a plugin (State/WaitQueue.swift), without a plugin: which leave how.
@Suite struct WaitQueueTests {
    /// A request whose caller can give up (a client disconnecting, the host cancelling).
    final class Caller {
        var gone = false
    }

    struct Request: WaitingRequest, Equatable {
        var name: String
        var deadline: Instant
        var caller: Caller
        var callerIsGone: Bool { caller.gone }

        static func == (a: Request, b: Request) -> Bool { a.name == b.name }
    }

    static let start = Instant(nanoseconds: 1_000_000_000)

    static func request(_ name: String, afterMs ms: Int64 = 1_000, caller: Caller = Caller()) -> Request {
        Request(name: name, deadline: start + .milliseconds(ms), caller: caller)
    }

    @Test func releasedInTheOrderTheyCame() {
        var queue = WaitQueue<Request>()
        for name in ["a", "b", "c"] {
            let added = queue.add(Self.request(name), limit: 10)
            #expect(added)
        }
        let released = queue.release()
        #expect(released.map(\.name) == ["a", "b", "c"])
        #expect(queue.isEmpty)
    }

    /// Released, then the worker's socket took no more: the rest go back ahead of what came
    /// meanwhile, each with its own deadline (not a new one).
    @Test func whatCouldNotGoWaitsAheadWithItsDeadline() {
        var queue = WaitQueue<Request>()
        for (name, ms) in [("a", 100), ("b", 200), ("c", 300)] { _ = queue.add(Self.request(name, afterMs: Int64(ms)), limit: 10) }
        let released = queue.release()
        _ = queue.add(Self.request("late", afterMs: 5_000), limit: 10)
        queue.putBack(released.dropFirst())
        #expect(queue.requests.map(\.name) == ["b", "c", "late"])
        #expect(queue.requests.map(\.deadline) == [Self.start + .milliseconds(200), Self.start + .milliseconds(300), Self.start + .milliseconds(5_000)])
        #expect(queue.expire(now: Self.start + .milliseconds(250)).map(\.name) == ["b"])
    }

    @Test func aFullQueueRefusesWithoutLosingWhatWaits() {
        var queue = WaitQueue<Request>()
        let added = [queue.add(Self.request("a"), limit: 2), queue.add(Self.request("b"), limit: 2), queue.add(Self.request("c"), limit: 2)]
        #expect(added == [true, true, false])
        let released = queue.release()
        #expect(released.map(\.name) == ["a", "b"])
    }

    /// The host cancels a call still waiting (never sent to a worker): it is dropped, and the
    /// plugin never sees it when it runs; the others go on in order.
    @Test func aCallCancelledBeforeItWasSentIsNeverSent() {
        var queue = WaitQueue<Request>()
        let cancelling = Caller()
        _ = queue.add(Self.request("a"), limit: 10)
        _ = queue.add(Self.request("cancelled", caller: cancelling), limit: 10)
        _ = queue.add(Self.request("c"), limit: 10)
        cancelling.gone = true
        let released = queue.release()
        #expect(released.map(\.name) == ["a", "c"])
    }

    @Test func aWithdrawnRequestLeavesAloneAndTheRestKeepTheirOrder() {
        var queue = WaitQueue<Request>()
        for name in ["a", "b", "c"] { _ = queue.add(Self.request(name), limit: 10) }
        #expect(queue.withdraw { $0.name == "b" }.map(\.name) == ["b"])
        #expect(queue.withdraw { $0.name == "z" }.isEmpty)
        #expect(queue.release().map(\.name) == ["a", "c"])
    }

    @Test func deadlinesExpireEachRequestOnItsOwn() {
        var queue = WaitQueue<Request>()
        let gone = Caller()
        gone.gone = true
        _ = queue.add(Self.request("short", afterMs: 10), limit: 10)
        _ = queue.add(Self.request("long", afterMs: 5_000), limit: 10)
        _ = queue.add(Self.request("abandoned", afterMs: 5_000, caller: gone), limit: 10)
        let early = queue.expire(now: Self.start + .milliseconds(9))
        #expect(early.isEmpty)
        #expect(queue.count == 2)  // the one nobody waits for has left, unanswered
        let due = queue.expire(now: Self.start + .milliseconds(10))
        #expect(due.map(\.name) == ["short"])
        let released = queue.release()
        #expect(released.map(\.name) == ["long"])
    }

    @Test func abandonedWhenThePluginWillNotRun() {
        var queue = WaitQueue<Request>()
        let gone = Caller()
        _ = queue.add(Self.request("a"), limit: 10)
        _ = queue.add(Self.request("b", caller: gone), limit: 10)
        gone.gone = true
        let abandoned = queue.abandon()
        #expect(abandoned.map(\.name) == ["a"])
        #expect(queue.isEmpty)
    }

    /// What waits for a plugin slow to start is bounded by bytes too: the first request always,
    /// the next while they fit together; every way out gives its bytes back.
    @Test func theBytesThatWaitAreBounded() {
        struct Sized: WaitingRequest {
            var size: Int
            var deadline: Instant
            var callerIsGone = false
        }
        var queue = WaitQueue<Sized>()
        #expect(queue.admits(size: 1_000, bytesLimit: 100))
        _ = queue.add(Sized(size: 1_000, deadline: Self.start), limit: 10)
        #expect(!queue.admits(size: 1, bytesLimit: 100) && queue.bytes == 1_000)
        _ = queue.release()
        #expect(queue.bytes == 0 && queue.admits(size: 60, bytesLimit: 100))
        _ = queue.add(Sized(size: 60, deadline: Self.start), limit: 10)
        _ = queue.add(Sized(size: 30, deadline: Self.start + .seconds(5)), limit: 10)
        #expect(queue.admits(size: 10, bytesLimit: 100) && !queue.admits(size: 11, bytesLimit: 100))
        #expect(queue.expire(now: Self.start + .seconds(1)).map(\.size) == [60])
        #expect(queue.bytes == 30)
        #expect(queue.withdraw { $0.size == 30 }.count == 1 && queue.bytes == 0)
        queue.putAhead([Sized(size: 5, deadline: Self.start)])
        #expect(queue.bytes == 5)
        // A request whose caller is gone leaves at the next expiry, its bytes with it; abandoned,
        // all of them.
        _ = queue.add(Sized(size: 7, deadline: Self.start + .seconds(60), callerIsGone: true), limit: 10)
        _ = queue.add(Sized(size: 9, deadline: Self.start + .seconds(60)), limit: 10)
        #expect(queue.bytes == 21)
        #expect(queue.expire(now: Self.start).map(\.size) == [5] && queue.bytes == 9)
        #expect(queue.abandon().count == 1 && queue.bytes == 0)
    }
}
