import NIOCore
import NIOEmbedded
import Testing
@testable import SupervisorKit

/// The driver's parts that decide without processes: the fork server's state (Lifecycle/ForkServerState.swift)
/// and the effects queue (Driver/Effects.swift).
@Suite struct ForkServerStateTests {
    final class Server {}
    typealias State = ForkServerState<Server>
    static let t0 = NIODeadline.uptimeNanoseconds(1_000_000_000_000)

    @Test func launchedThenAnsweredServes() {
        var state = State()
        let s = Server()
        #expect(!state.isRunningOrComing)
        state.launched(s)
        #expect(state.launching === s && state.ready == nil && state.isRunningOrComing)
        state.answered(s)
        #expect(state.ready === s && state.launching == nil && state.problem == nil)
    }

    @Test func aLaunchThatFailsGivesUpWithItsReason() {
        var state = State()
        state.launchFailed("the fork server could not start: ENOENT; workers are exec'd")
        #expect(state.problem == "the fork server could not start: ENOENT; workers are exec'd")
        #expect(!state.isRunningOrComing && state.ready == nil)
    }

    /// A server that refused at start was ended by us: its exit is no death to start another after.
    @Test func aRefusedServersExitStartsNoOther() {
        var state = State()
        let s = Server()
        state.launched(s)
        state.refused(s, "refused")
        #expect(state.ended(s, pid: 7, how: "signal SIGKILL", now: Self.t0, shuttingDown: false) == .nothing)
        #expect(state.problem == "refused")
        #expect(state.ends.isEmpty)
    }

    @Test func anUnaskedEndStartsAnotherUntilItKeepsEnding() {
        var state = State(endLimit: 3, endWindow: .seconds(60))
        for i in 0..<2 {
            let s = Server()
            state.launched(s)
            state.answered(s)
            #expect(state.ended(s, pid: Int32(10 + i), how: "signal SIGSEGV", now: Self.t0 + .seconds(Int64(i)), shuttingDown: false) == .startAnother)
            #expect(!state.isRunningOrComing)
        }
        let last = Server()
        state.launched(last)
        let after = state.ended(last, pid: 12, how: "signal SIGSEGV", now: Self.t0 + .seconds(2), shuttingDown: false)
        #expect(after == .gaveUp("the fork server ended 3 times within 60 s (last: pid 12, signal SIGSEGV); workers are exec'd"))
        #expect(state.problem == "the fork server ended 3 times within 60 s (last: pid 12, signal SIGSEGV); workers are exec'd")
    }

    @Test func endsOutsideTheWindowAreForgotten() {
        var state = State(endLimit: 2, endWindow: .seconds(60))
        let a = Server(), b = Server()
        state.launched(a)
        #expect(state.ended(a, pid: 1, how: "exit status 1", now: Self.t0, shuttingDown: false) == .startAnother)
        state.launched(b)
        #expect(state.ended(b, pid: 2, how: "exit status 1", now: Self.t0 + .seconds(61), shuttingDown: false) == .startAnother)
        #expect(state.ends.count == 1)
    }

    @Test func atShutdownItIsStoppedAndItsEndStartsNothing() {
        var state = State()
        let s = Server()
        state.launched(s)
        state.answered(s)
        #expect(state.shutdown() === s)
        #expect(!state.isRunningOrComing)
        #expect(state.ended(s, pid: 3, how: "exit status 0", now: Self.t0, shuttingDown: true) == .nothing)
        #expect(state.ends.isEmpty)
    }

    /// A spawn found it broken: none is ready until its exit is seen, and then another starts.
    @Test func aBrokenServerIsReplacedOnceItsExitIsSeen() {
        var state = State()
        let s = Server()
        state.launched(s)
        state.answered(s)
        state.broke(s)
        #expect(state.ready == nil && state.problem == nil)
        #expect(state.ended(s, pid: 4, how: "signal SIGKILL", now: Self.t0, shuttingDown: false) == .startAnother)
    }

    /// The end of a server that is not the current one (a broken one, after another launched)
    /// starts no third one.
    @Test func theEndOfAnOldServerLeavesTheNewOneAlone() {
        var state = State()
        let old = Server(), new = Server()
        state.launched(new)
        #expect(state.ended(old, pid: 5, how: "signal SIGKILL", now: Self.t0, shuttingDown: false) == .nothing)
        #expect(state.launching === new)
    }
}

@Suite struct EffectsQueueTests {
    final class Log { var entries: [String] = [] }

    /// Effects run after the input that posted them, in order, once per turn; what is posted while
    /// they run joins the same run.
    @Test func effectsRunAfterTheInputInOrderOncePerTurn() throws {
        let loop = EmbeddedEventLoop()
        let effects = Effects(loop: loop)
        let log = Log()
        var runs = 0
        effects.carryOut = { effect in
            switch effect {
            case .settleReloads:
                log.entries.append("settle")
                effects.post(.startWaitingPlugins)
            case .startWaitingPlugins: log.entries.append("start")
            case .warmCatalog: log.entries.append("warm")
            default: Issue.record("unexpected effect")
            }
        }
        loop.execute {
            runs += 1
            effects.post(.settleReloads)
            effects.post(.warmCatalog)
            // Not yet: the input is still running.
            #expect(log.entries.isEmpty)
        }
        loop.run()
        #expect(runs == 1)
        #expect(log.entries == ["settle", "warm", "start"])
        // A later turn gets a run of its own.
        loop.execute { effects.post(.warmCatalog) }
        loop.run()
        #expect(log.entries == ["settle", "warm", "start", "warm"])
        try loop.syncShutdownGracefully()
    }
}
