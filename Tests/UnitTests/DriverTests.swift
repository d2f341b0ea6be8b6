import NIOCore
import NIOEmbedded
import Foundation
import Testing
import SupervisorCore
@testable import SupervisorKit

/// The driver's parts that decide without processes: the fork server's state (Lifecycle/ForkServerState.swift)
/// and the effects queue (Driver/Effects.swift).
@Suite struct ForkServerStateTests {
    final class Server {}
    typealias State = ForkServerState<Server>
    static let t0 = Instant(nanoseconds: 1_000_000_000_000)

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

/// The deadline timer (Driver/DeadlineTimer.swift): armed for the earliest deadline on its grid,
/// and not at all while nothing has one.
@Suite struct DeadlineTimerTests {
    static func ms(_ n: Int64) -> NIODeadline { .uptimeNanoseconds(UInt64(n) * 1_000_000) }

    @Test func armedForTheEarliestTickAndNotWhileNothingIsDue() {
        let loop = EmbeddedEventLoop()
        let timer = DeadlineTimer(loop: loop)
        var pending: [NIODeadline] = []
        var checks: [NIODeadline] = []
        timer.check = { now in
            checks.append(now)
            pending.removeAll { $0 <= now }
            return pending.min()
        }
        loop.advanceTime(to: Self.ms(1_000))
        // Before `start` nothing is kept; `start` checks at its next tick for what came before.
        timer.due(Self.ms(1_500))
        #expect(timer.armedFor == nil)
        timer.start()
        #expect(timer.armedFor == Self.ms(1_000))
        loop.run()
        #expect(checks == [Self.ms(1_000)])
        #expect(timer.armedFor == nil)

        // Deadlines off the grid wait for the next tick; a later one does not move it, an earlier one does.
        pending = [Self.ms(1_025), Self.ms(1_005)]
        timer.due(Self.ms(1_025))
        #expect(timer.armedFor == Self.ms(1_030))
        timer.due(Self.ms(1_005))
        #expect(timer.armedFor == Self.ms(1_010))
        timer.due(Self.ms(9_000))
        #expect(timer.armedFor == Self.ms(1_010))
        loop.advanceTime(to: Self.ms(1_009))
        #expect(checks.count == 1)
        loop.advanceTime(to: Self.ms(1_010))
        #expect(checks.last == Self.ms(1_010) && pending == [Self.ms(1_025)])
        #expect(timer.armedFor == Self.ms(1_030))
        loop.advanceTime(to: Self.ms(1_030))
        #expect(checks.count == 3 && pending.isEmpty)
        // Nothing due: not armed, and an hour passes without a check.
        #expect(timer.armedFor == nil)
        loop.advanceTime(by: .hours(1))
        #expect(checks.count == 3)

        // A deadline set during a check is kept with what the check returns.
        pending = [loop.now + .milliseconds(50)]
        timer.check = { now in
            checks.append(now)
            pending.removeAll { $0 <= now }
            timer.due(now + .milliseconds(20))
            return pending.min()
        }
        timer.due(pending[0])
        loop.advanceTime(by: .milliseconds(50))
        #expect(checks.count == 4)
        #expect(timer.armedFor == loop.now + .milliseconds(20))

        // Stopped: disarmed, and deadlines are not kept.
        timer.stop()
        #expect(timer.armedFor == nil)
        timer.due(loop.now + .milliseconds(10))
        #expect(timer.armedFor == nil)
        loop.advanceTime(by: .seconds(1))
        #expect(checks.count == 4)
    }
}

/// A worker's cgroup folder's name, made also as a mount point in the worker's own root: never a
/// file name over 255 bytes, whatever the identifier (up to 255 characters) and the spawn count.
@Suite struct GroupNameTests {
    @Test func aLongIdentifierIsCutAndHashed() {
        #expect(Lifecycle.groupName("com.example.a", 7) == "com.example.a-7")
        let long = String(repeating: "a.", count: 127)  // 254 bytes
        let name = Lifecycle.groupName(long, Int.max)
        #expect(name.utf8.count <= 255, "\(name.utf8.count)")
        #expect(name.hasPrefix(String(long.prefix(200)) + "~") && name.hasSuffix("-\(Int.max)"))
        // Two identifiers with the same first 200 bytes get different names.
        #expect(Lifecycle.groupName(long, 1) != Lifecycle.groupName(long.dropLast(2) + "bb", 1))
    }
}

/// The janitor (Driver/Janitor.swift): what it was handed is done when `finish` returns.
@Suite struct JanitorTests {
    /// `finish` waits for every queued removal, done on its own thread: the supervisor removes the
    /// cgroup tree's bases right after it, and an embedded host's program goes on.
    @Test func finishReturnsOnceEverythingQueuedIsDone() throws {
        let root = FileManager.default.temporaryDirectory.path + "/janitor-\(getpid())-\(UInt64.random(in: 0...UInt64.max))"
        try FileManager.default.createDirectory(atPath: root + "/tmp", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: root) }
        let janitor = Janitor(folder: root + "/tmp")
        // Made first, then all handed over at once, so that the thread is far behind at `finish`.
        let folders = (0..<120).map { root + "/w\($0)" }
        for folder in folders {
            try FileManager.default.createDirectory(atPath: folder + "/a", withIntermediateDirectories: true)
            for f in 0..<30 { FileManager.default.createFile(atPath: folder + "/a/\(f)", contents: Data(count: 512)) }
        }
        for (i, folder) in folders.enumerated() { janitor.removeTree(folder, renamed: i % 2 == 0) }
        janitor.finish()
        let left = folders.filter { FileManager.default.fileExists(atPath: $0) }
        let ended = (try? FileManager.default.contentsOfDirectory(atPath: root + "/tmp")) ?? []
        #expect(left.count == 0, "\(left.count) of 120 folders were still there when finish returned")
        #expect(ended.count == 0, "\(ended.count) renamed folders were still there when finish returned")
    }
}
