import Testing
import SupervisorCore

/// Every pair of phases: exactly the moves the table lists are legal, and each legal move is one
/// the supervisor makes (named below), so a change to the table shows here.
@Suite struct PluginPhaseTests {
    static let all: [PluginPhase] = [.waiting, .starting, .running, .restarting, .failed(byDependency: false), .failed(byDependency: true), .stopped,
                                     .inactive]

    /// The legal moves, written out by hand (from → to), with why each exists.
    static let legal: Set<String> = [
        "waiting→starting", "stopped→starting", "failed→starting", "failed (dependency)→starting",  // first spawn, start on request
        "waiting→restarting", "restarting→restarting", "stopped→restarting", "failed→restarting", "failed (dependency)→restarting",
        "starting→restarting", "running→restarting",  // a crash
        "starting→running", "restarting→running",  // startup answered
        "restarting→waiting", "stopped→waiting", "failed→waiting", "failed (dependency)→waiting", "waiting→waiting",  // dependencies down
        "inactive→starting", "inactive→waiting", "waiting→inactive",  // activated (SPEC §16); onCall, not needed yet
        "running→inactive",  // stopped for being idle
        "failed→inactive", "failed (dependency)→inactive", "stopped→inactive",  // onCall, its bundle changed or fixed: waits to be needed
    ]

    @Test(arguments: all)
    func movesFrom(_ from: PluginPhase) {
        for to in Self.all {
            let allowed = PluginPhase.allows(from: from, to: to)
            let expected: Bool
            switch to {
            case .failed, .stopped: expected = true  // anything can fail or be stopped
            default: expected = Self.legal.contains("\(from)→\(to)")
            }
            #expect(allowed == expected, "\(from) → \(to)")
        }
    }

    @Test func refusedMovesNamed() {
        // The moves that would be bugs: running without answering startup, skipping the stop.
        for (from, to) in [(PluginPhase.waiting, PluginPhase.running), (.stopped, .running), (.failed(byDependency: false), .running),
                           (.running, .waiting), (.running, .starting), (.starting, .starting), (.starting, .waiting), (.restarting, .starting),
                           (.inactive, .running), (.inactive, .restarting), (.starting, .inactive), (.restarting, .inactive)] {
            #expect(!PluginPhase.allows(from: from, to: to), "\(from) → \(to)")
        }
    }

    @Test func shownStates() {
        #expect(PluginPhase.waiting.shown == "starting")
        #expect(PluginPhase.failed(byDependency: true).shown == "failed")
        #expect(Set(Self.all.map(\.shown)) == ["starting", "running", "restarting", "failed", "stopped", "inactive"])
    }
}

@Suite struct WorkerPhaseTests {
    static let all: [WorkerPhase] = [.spawned, .loaded, .startingUp, .running, .draining, .stopping,
                                     .exited(afterStop: false, exit), .exited(afterStop: true, exit), .finalized]
    static let exit = WorkerExit(pid: 7, code: 0, signaled: false)

    static let legal: Set<String> = [
        "spawned→loaded", "loaded→startingUp", "startingUp→running",  // hello, startup sent, startup answered
        "spawned→stopping", "loaded→stopping", "startingUp→stopping", "running→stopping",  // a stop at any point before the exit
        "loaded→draining", "startingUp→draining", "running→draining",  // a stop that waits for the calls inside
        "draining→stopping",  // the last call was answered (or the drain time is up): willTerminate
        "stopping→exited (stopped)", "draining→exited (stopped)",  // reaped after a stop
        "spawned→exited", "loaded→exited", "startingUp→exited", "running→exited",  // reaped: a crash or a kill
        "exited→finalized", "exited (stopped)→finalized",  // recorded
    ]

    @Test(arguments: all)
    func movesFrom(_ from: WorkerPhase) {
        for to in Self.all {
            #expect(WorkerPhase.allows(from: from, to: to) == Self.legal.contains("\(from)→\(to)"), "\(from) → \(to)")
        }
    }

    @Test func derivedFacts() {
        #expect(WorkerPhase.stopping.stopRequested)
        #expect(WorkerPhase.draining.stopRequested)
        #expect(WorkerPhase.exited(afterStop: true, Self.exit).stopRequested)
        #expect(!WorkerPhase.exited(afterStop: false, Self.exit).stopRequested)
        #expect(WorkerPhase.finalized.hasExited && WorkerPhase.exited(afterStop: false, Self.exit).hasExited)
        #expect(!WorkerPhase.running.hasExited)
    }
}

@Suite struct RestartPolicyTests {
    let policy = RestartPolicy(limit: 5, windowSeconds: 60, backoffBaseMs: 100, backoffMaxMs: 10_000)
    let t0 = Instant(nanoseconds: 1_000_000_000_000)

    @Test func backoffDoublesFromTheSecondRestartAndIsCapped() {
        #expect(RestartPolicy.backoff(previousRestarts: 0, baseMs: 100, maxMs: 10_000, jitter: 1) == 0)
        #expect(RestartPolicy.backoff(previousRestarts: 1, baseMs: 100, maxMs: 10_000, jitter: 1) == 100)
        #expect(RestartPolicy.backoff(previousRestarts: 2, baseMs: 100, maxMs: 10_000, jitter: 1) == 200)
        #expect(RestartPolicy.backoff(previousRestarts: 4, baseMs: 100, maxMs: 10_000, jitter: 1) == 800)
        #expect(RestartPolicy.backoff(previousRestarts: 30, baseMs: 100, maxMs: 10_000, jitter: 1) == 10_000)
        #expect(RestartPolicy.backoff(previousRestarts: 1, baseMs: 100, maxMs: 10_000, jitter: 1.2) == 120)
        #expect(RestartPolicy.backoff(previousRestarts: 1, baseMs: 100, maxMs: 10_000, jitter: 0.8) == 80)
    }

    @Test func intensityLimitGivesUpAfterLimitRestartsInTheWindow() {
        var history: [Instant] = []
        var delays: [Int] = []
        for i in 0..<5 {
            guard case .restart(let delay, let attempt) = policy.decide(history: &history, now: t0 + .seconds(Int64(i)), jitter: 1) else {
                Issue.record("restart \(i) refused")
                return
            }
            #expect(attempt == i + 1)
            delays.append(delay)
        }
        #expect(delays == [0, 100, 200, 400, 800])
        #expect(policy.decide(history: &history, now: t0 + .seconds(5), jitter: 1) == .giveUp(restartsInWindow: 5))
        #expect(history.count == 5, "a refused restart is not recorded")
    }

    @Test func oldRestartsLeaveTheWindow() {
        var history = (0..<5).map { t0 + .seconds(Int64($0)) }
        // 60 s after the first, it has left the window: one more restart is allowed, with the backoff for the 4 still in it.
        #expect(policy.decide(history: &history, now: t0 + .seconds(60), jitter: 1) == .restart(delayMs: 800, attempt: 5))
        // Long after all of them: a fresh start, immediate.
        var old = (0..<5).map { t0 + .seconds(Int64($0)) }
        #expect(policy.decide(history: &old, now: t0 + .seconds(600), jitter: 1) == .restart(delayMs: 0, attempt: 1))
    }

    /// The guess a standby worker is spawned on: the same answer `decide` would give about the
    /// delay being 0, without recording anything.
    @Test func restartsAtOnceOnlyForTheFirstRestartInTheWindow() {
        var history: [Instant] = []
        #expect(policy.restartsAtOnce(history: history, now: t0))
        _ = policy.decide(history: &history, now: t0, jitter: 1)
        #expect(!policy.restartsAtOnce(history: history, now: t0 + .seconds(1)), "the second restart waits 100 ms")
        #expect(history.count == 1, "asking records nothing")
        #expect(policy.restartsAtOnce(history: history, now: t0 + .seconds(60)), "the first restart has left the window")
        #expect(!RestartPolicy(limit: 0, windowSeconds: 60, backoffBaseMs: 100, backoffMaxMs: 10_000).restartsAtOnce(history: [], now: t0),
                "no restart at all")
        #expect(RestartPolicy(limit: 5, windowSeconds: 60, backoffBaseMs: 0, backoffMaxMs: 0).restartsAtOnce(history: [t0], now: t0),
                "a zero backoff restarts at once every time")
    }
}
