import Testing
import SupervisorCore

/// Calls that survive a crash (Replay/): which calls of a dead worker are replayed, retried, failed
/// or dropped, from the witness of what its plugin may have started, without a process.
@Suite struct ReplayTests {
    /// A call as the driver would keep it: its number in arrival order, its method and counts.
    struct Call: ReplayableCall, Equatable {
        var number: Int
        var method: String
        var deadline: Instant
        var retries = 0
        var crashes = 0
        var callerIsGone = false
        var answerBegun = false
    }

    static let now = Instant(nanoseconds: 1_000_000_000_000)
    static let later = now + .seconds(30)
    static let replay = CrashReplay(plugin: "p", idempotent: IdempotentMethods(patterns: ["get*", "sum"]), retryLimit: 1, crashLimit: 5)

    /// A worker sent `count` calls under ids 1...count (call numbers equal to the ids).
    static func sent(_ methods: [String], deadline: Instant = later) -> (calls: [(id: UInt64, entry: Call)], watermark: TakenWatermark) {
        var watermark = TakenWatermark()
        var calls: [(id: UInt64, entry: Call)] = []
        for (index, method) in methods.enumerated() {
            let id = UInt64(index + 1)
            watermark.sent(id)
            calls.append((id, Call(number: index + 1, method: method, deadline: deadline)))
        }
        return (calls, watermark)
    }

    static func decide(_ calls: [(id: UInt64, entry: Call)], _ watermark: TakenWatermark, unread: Set<UInt64> = [],
                       successor: CrashReplay.Successor = .comes, replay: CrashReplay = replay) -> CrashReplay.Outcome<Call> {
        replay.decide(calls, watermark: watermark, unread: unread, crash: "killed by SIGSEGV", successor: successor, now: now)
    }

    /// Each call in exactly one action: what the driver answers at most once.
    static func expectOneActionEach(_ outcome: CrashReplay.Outcome<Call>, _ calls: [(id: UInt64, entry: Call)]) {
        #expect(outcome.actions.map(\.call.number).sorted() == calls.map(\.entry.number).sorted())
    }

    // MARK: Matching methods

    @Test func prefixesMatchWhatTheyStartAndNamesMatchWhole() {
        let methods = IdempotentMethods(patterns: ["get*", "sum", "list.*"])
        #expect(methods.contains("get") && methods.contains("getUser") && methods.contains("sum") && methods.contains("list.all"))
        #expect(!methods.contains("forget") && !methods.contains("sums") && !methods.contains("su") && !methods.contains("list"))
        #expect(IdempotentMethods(patterns: ["*"]).contains("anything"))
        #expect(!IdempotentMethods().contains("get") && IdempotentMethods().isEmpty)
        // A worker's `hello` flags entries read as the manifest's are (a C plugin's `idempotent`
        // message may name a prefix).
        let flagged = IdempotentMethods().adding(flagged: ["put", "x*"])
        #expect(flagged.contains("put") && flagged.contains("x*") && flagged.contains("xy") && !flagged.contains("putAll") && !flagged.contains("y"))
    }

    @Test func theManifestAndHelloMakeTheRules() throws {
        var manifest = Manifest.unusable(bundle: "/b/p", bytes: [])
        manifest.idempotent = ["read*"]
        manifest.limits.retries = 3
        let replay = CrashReplay(manifest: manifest, flagged: ["ping"])
        #expect(replay.retryLimit == 3 && replay.crashLimit == CrashReplay.defaultCrashLimit)
        #expect(replay.idempotent.contains("readAll") && replay.idempotent.contains("ping") && !replay.idempotent.contains("write"))
    }

    // MARK: The watermark

    @Test func theWatermarkOnlyMovesOnAndIsClampedToWhatWasSent() {
        var watermark = TakenWatermark()
        for id in 1...5 as ClosedRange<UInt64> { watermark.sent(id) }
        #expect(watermark.reported(2) == .accepted(2))
        #expect(watermark.reported(2) == .accepted(2))
        #expect(watermark.reported(9) == .clamped(claimed: 9, to: 5))
        #expect(watermark.taken == 5)
        // Above the clamp once more is still within what was sent after it.
        watermark.sent(6)
        #expect(watermark.reported(6) == .accepted(6))
        #expect(watermark.mayHaveStarted(6, unread: []) && !watermark.mayHaveStarted(7, unread: []))
        // The kernel's witness wins over the worker's word.
        #expect(!watermark.mayHaveStarted(3, unread: [3]))
    }

    @Test("a watermark taken over in an upgrade goes on from where it stood: lower is a lie, above what was sent is clamped, and it never starts above what was sent")
    func aWatermarkResumedAfterAnUpgrade() {
        var w = TakenWatermark(resumedAt: 40, taken: 30)
        #expect(w.taken == 30 && w.highestSent == 40)
        #expect(w.reported(29) == .lie(.init(claimed: 29, earlier: 30)) && w.taken == nil)
        var fresh = TakenWatermark(resumedAt: 40, taken: 30)
        #expect(fresh.reported(35) == .accepted(35))
        fresh.sent(41)
        #expect(fresh.reported(50) == .clamped(claimed: 50, to: 41))
        #expect(TakenWatermark(resumedAt: 10, taken: 20).taken == 10)
    }

    @Test func aWatermarkThatGoesBackIsALieAndTrustEnds() {
        var watermark = TakenWatermark()
        for id in 1...10 as ClosedRange<UInt64> { watermark.sent(id) }
        _ = watermark.reported(6)
        #expect(watermark.reported(2) == .lie(.init(claimed: 2, earlier: 6)))
        #expect(!watermark.isTrusted && watermark.taken == nil)
        #expect(watermark.reported(10) == .ignored)
        #expect(!watermark.isTrusted)
        // Only unread frames are not started now.
        #expect((1...10 as ClosedRange<UInt64>).filter { !watermark.mayHaveStarted($0, unread: [9, 10]) } == [9, 10])
    }

    // MARK: Crashes

    /// 64 calls wait behind a slow one: the slow one (started, not idempotent) fails, the 64 go to
    /// the next worker in order ahead of what arrived since, and none goes twice.
    @Test func sixtyFourCallsBehindASlowOneAreAllReplayedInOrder() throws {
        var (calls, watermark) = Self.sent(["slow"] + Array(repeating: "put", count: 64))
        _ = watermark.reported(1)
        // 2...30 were read by the worker, not taken; 31...65 still in the socket.
        let outcome = Self.decide(calls, watermark, unread: Set(31...65))
        Self.expectOneActionEach(outcome, calls)
        #expect(outcome.replayed == 64 && outcome.retried == 0 && outcome.failedStarted == 1)
        #expect(outcome.failures.map(\.call.number) == [1])
        let slow = try #require(outcome.failures.first)
        #expect(slow.started && slow.error.code == "unavailable" && slow.error.message.contains("slow is not idempotent"))
        #expect(outcome.resent.map(\.number) == Array(2...65))
        // The death is the slow call's (it had started) and the next in line's: not the 63 behind.
        #expect(outcome.resent.map(\.crashes) == [1] + Array(repeating: 0, count: 63))
        #expect(outcome.resent.allSatisfy { $0.retries == 0 && $0.deadline == Self.later })

        var queue = WaitQueue<Call>()
        for number in 66...68 { _ = queue.add(Call(number: number, method: "put", deadline: Self.later), limit: 8) }
        queue.putAhead(outcome.resent)
        let next = queue.release()
        #expect(next.map(\.number) == Array(2...68))
        #expect(Set(next.map(\.number)).count == next.count)
    }

    @Test func onlyStartedCallsOfMethodsNotIdempotentFail() throws {
        var (calls, watermark) = Self.sent(["get", "put", "sum", "put", "getAll", "put"])
        _ = watermark.reported(4)
        let outcome = Self.decide(calls, watermark, unread: [6])
        Self.expectOneActionEach(outcome, calls)
        try #require(outcome.failures.count == 2)
        #expect(outcome.actions == [
            .retry(Call(number: 1, method: "get", deadline: Self.later, retries: 1, crashes: 1)),
            .fail(calls[1].entry, outcome.failures[0].error, started: true),
            .retry(Call(number: 3, method: "sum", deadline: Self.later, retries: 1, crashes: 1)),
            .fail(calls[3].entry, outcome.failures[1].error, started: true),
            // Calls had started: the death is theirs and the next in line's (5), not the one behind.
            .replay(Call(number: 5, method: "getAll", deadline: Self.later, crashes: 1)),
            .replay(Call(number: 6, method: "put", deadline: Self.later, crashes: 0)),
        ])
        #expect(outcome.failures.allSatisfy { $0.started && $0.error.code == "unavailable" })
        #expect(outcome.replayed == 2 && outcome.retried == 2 && outcome.failedStarted == 2 && outcome.failedUnstarted == 0)
    }

    @Test func retriesAreBoundedByTheLimitAndTheDeadline() {
        let limited = CrashReplay(plugin: "p", idempotent: IdempotentMethods(patterns: ["get"]), retryLimit: 2)
        var call = Call(number: 1, method: "get", deadline: Self.later)
        for attempt in 1...2 {
            guard case .retry(let next) = limited.decide(call, started: true, crash: "killed by SIGKILL", successor: .comes, now: Self.now) else {
                Issue.record("attempt \(attempt) not retried")
                return
            }
            #expect(next.retries == attempt)
            call = next
        }
        guard case .fail(_, let error, let started) = limited.decide(call, started: true, crash: "killed by SIGKILL", successor: .comes, now: Self.now) else {
            Issue.record("retried past limits.retries")
            return
        }
        #expect(started && error.code == "unavailable" && error.message.contains("retried 2 times already (limits.retries: 2)"))

        // None at all with `retries: 0`.
        let none = CrashReplay(plugin: "p", idempotent: IdempotentMethods(patterns: ["get"]), retryLimit: 0)
        #expect(none.decide(Call(number: 1, method: "get", deadline: Self.later), started: true, crash: "x", successor: .comes, now: Self.now)
                == .fail(Call(number: 1, method: "get", deadline: Self.later), ErrorBody(.unavailable, "p's worker ended (x) after its plugin started get, retried 0 times already (limits.retries: 0); it is not run again"), started: true))

        // Past its deadline: a timeout, started or not, sent nowhere.
        let (due, watermark) = Self.sent(["get", "get"], deadline: Self.now)
        var taken = watermark
        _ = taken.reported(1)
        let outcome = Self.decide(due, taken)
        #expect(outcome.failures.map(\.error.code) == ["timeout", "timeout"])
        #expect(outcome.failures.map(\.started) == [true, false])
        #expect(outcome.resent.isEmpty)
    }

    @Test func aStreamWhoseAnswerHadBegunIsNotRunAgainEvenIfIdempotent() {
        var streaming = Call(number: 1, method: "get", deadline: Self.later)
        streaming.answerBegun = true
        #expect(Self.replay.decide(streaming, started: true, crash: "x", successor: .comes, now: Self.now)
                == .fail(streaming, ErrorBody(.unavailable, "p's worker ended (x) while get answered in a stream; part of its answer reached the caller, "
                                                   + "so it is not run again"), started: true))
        // Its answer not begun: retried as any idempotent call.
        streaming.answerBegun = false
        guard case .retry = Self.replay.decide(streaming, started: true, crash: "x", successor: .comes, now: Self.now) else {
            Issue.record("an idempotent stream call none of whose answer came is retried")
            return
        }
    }

    @Test func aCallerThatLeftIsDroppedNotAnsweredNotSent() {
        var (calls, watermark) = Self.sent(["get", "put"])
        calls[0].entry.callerIsGone = true
        calls[1].entry.callerIsGone = true
        _ = watermark.reported(1)
        let outcome = Self.decide(calls, watermark)
        #expect(outcome.actions == [.drop(calls[0].entry), .drop(calls[1].entry)])
        #expect(outcome.dropped == 2 && outcome.resent.isEmpty && outcome.failures.isEmpty)
    }

    @Test(arguments: [
        (PluginPhase.failed(byDependency: false), false, "p is failed: bad bundle"),
        (PluginPhase.stopped, false, "p is stopped: bad bundle"),
        (PluginPhase.restarting, true, "the supervisor is shutting down"),
    ])
    func aPluginThatWillNotComeBackFailsEveryCallAtOnce(_ phase: PluginPhase, _ shuttingDown: Bool, _ reason: String) {
        let successor = CrashReplay.Successor.after(Route.Target(identifier: "p", phase: phase, problem: "bad bundle"), shuttingDown: shuttingDown)
        #expect(successor == .never(reason: reason))
        var (calls, watermark) = Self.sent(["get", "put", "put"])
        _ = watermark.reported(2)
        let outcome = Self.decide(calls, watermark, successor: successor)
        #expect(outcome.resent.isEmpty && outcome.replayed == 0 && outcome.retried == 0)
        #expect(outcome.failures.map(\.call.number) == [1, 2, 3])
        #expect(outcome.failures.map(\.started) == [true, true, false])
        #expect(outcome.failures.allSatisfy { $0.error.code == "unavailable" && $0.error.message.hasSuffix("no worker follows it: \(reason)") })
    }

    @Test func aRestartingPluginHasASuccessor() {
        #expect(CrashReplay.Successor.after(Route.Target(identifier: "p", phase: .restarting), shuttingDown: false) == .comes)
        #expect(CrashReplay.Successor.after(Route.Target(identifier: "p", phase: .waiting), shuttingDown: false) == .comes)
    }

    // MARK: Poison calls

    /// A started idempotent call that kills every worker: sent 1 + `retries` times, then failed.
    @Test func aPoisonCallEndsAfterItsRetries() {
        let replay = CrashReplay(plugin: "p", idempotent: IdempotentMethods(patterns: ["*"]), retryLimit: 3)
        var call = Call(number: 1, method: "crash", deadline: Self.later)
        var sends = 1
        while case .retry(let next) = replay.decide(call, started: true, crash: "killed by SIGSEGV", successor: .comes, now: Self.now) {
            call = next
            sends += 1
            if sends > 100 { break }
        }
        #expect(sends == 4)
    }

    /// A call whose frame kills each worker before its plugin takes it: replayed until `crashLimit`
    /// workers have died holding it, then failed, not started.
    @Test func aCallThatKillsEachWorkerBeforeItStartsEnds() {
        var call = Call(number: 1, method: "put", deadline: Self.later)
        var sends = 1
        var last: CrashReplay.Action<Call>?
        while sends <= 100 {
            let action = Self.replay.decide(call, started: false, crash: "killed by SIGSEGV", successor: .comes, now: Self.now)
            last = action
            guard case .replay(let next) = action else { break }
            call = next
            sends += 1
        }
        #expect(sends == Self.replay.crashLimit)
        guard case .fail(_, let error, let started) = last else { Issue.record("not failed: \(String(describing: last))"); return }
        #expect(!started && error.message.contains("5 workers have ended holding this call"))
    }

    /// Six calls that each kill the worker that takes them, and a harmless one queued behind them:
    /// each death is laid to the call that had started and the next in line, so the harmless one
    /// is counted once (when it was next), and runs once they are gone (it failed after five
    /// deaths it had no part in).
    @Test func aCallBehindPoisonCallsIsNotCountedForTheirDeaths() throws {
        let replay = CrashReplay(plugin: "p", idempotent: IdempotentMethods(patterns: []), retryLimit: 1, crashLimit: 5)
        var queue = (1...6).map { Call(number: $0, method: "crash\($0)", deadline: Self.later) } + [Call(number: 7, method: "echo", deadline: Self.later)]
        for death in 1...6 {
            // The next worker gets the queue in order; its plugin takes the first call and dies.
            var watermark = TakenWatermark()
            let calls = queue.enumerated().map { (id: UInt64($0.offset + 1), entry: $0.element) }
            for call in calls { watermark.sent(call.id) }
            _ = watermark.reported(1)
            let outcome = replay.decide(calls, watermark: watermark, unread: [], crash: "killed by SIGSEGV", successor: .comes, now: Self.now)
            try #require(outcome.failures.count == 1, "death \(death)")
            #expect(outcome.failures[0].started && outcome.failures[0].call.number == death)
            queue = outcome.resent
        }
        #expect(queue.map(\.number) == [7] && queue[0].crashes == 1)
        // A death with no call started (a frame that kills the worker before its plugin takes it)
        // counts against every call it held.
        var watermark = TakenWatermark()
        watermark.sent(1)
        watermark.sent(2)
        let calls = [(id: UInt64(1), entry: queue[0]), (id: UInt64(2), entry: Call(number: 8, method: "echo", deadline: Self.later))]
        let outcome = replay.decide(calls, watermark: watermark, unread: [1, 2], crash: "killed by SIGSEGV", successor: .comes, now: Self.now)
        #expect(outcome.resent.map(\.crashes) == [2, 1])
    }

    /// A frame that kills each worker on receipt, behind a long call the plugin has taken: it is
    /// next in line at every death, counted each time, and fails after `crashLimit` of them.
    @Test func aCallThatKillsOnReceiptBehindALongOneEnds() {
        let replay = CrashReplay(plugin: "p", idempotent: IdempotentMethods(patterns: ["long"]), retryLimit: 100, crashLimit: 5)
        var queue = [Call(number: 1, method: "long", deadline: Self.later), Call(number: 2, method: "poison", deadline: Self.later)]
        var deaths = 0
        while queue.contains(where: { $0.number == 2 }), deaths < 20 {
            deaths += 1
            var watermark = TakenWatermark()
            let calls = queue.enumerated().map { (id: UInt64($0.offset + 1), entry: $0.element) }
            for call in calls { watermark.sent(call.id) }
            _ = watermark.reported(1)
            let outcome = replay.decide(calls, watermark: watermark, unread: [], crash: "killed by SIGSEGV", successor: .comes, now: Self.now)
            queue = outcome.resent
        }
        #expect(deaths == 5, "the poison frame was sent again \(deaths) times")
    }

    /// A crash loop that hits the restart intensity limit: the plugin is failed, and the calls of
    /// its last worker get `unavailable` naming the crash loop.
    @Test func aCrashLoopFailsTheCallsNamingIt() {
        let policy = RestartPolicy(limit: 3, windowSeconds: 60, backoffBaseMs: 100, backoffMaxMs: 1_000)
        var life = PluginLife(phase: .starting)
        _ = life.workerRuns("p", version: "1.0.0")
        let crash = PluginLife.Ending(status: ExitStatus(signal: "SIGSEGV", reason: .signaled), described: "killed by SIGSEGV", abnormal: true,
                                      afterStop: false, everRan: true)
        var successor = CrashReplay.Successor.comes
        for second in 0..<4 {
            _ = life.workerEnded(crash, .init(identifier: "p", restartPolicy: .onFailure), restartPolicy: policy, now: Self.now + .seconds(second), jitter: 1)
            successor = .after(Route.Target(identifier: "p", phase: life.phase, problem: life.problem), shuttingDown: false)
            if successor != .comes { break }
            _ = life.move(to: .running)
        }
        let (calls, watermark) = Self.sent(["get", "put"])
        let outcome = Self.decide(calls, watermark, successor: successor)
        #expect(outcome.failures.count == 2)
        #expect(outcome.failures.allSatisfy { $0.error.code == "unavailable" && $0.error.message.contains("restarted 3 times in 60 s") })
    }

    // MARK: Lying workers

    /// It claims calls it never took (even ones never sent): they count as started, so calls not
    /// idempotent fail with `started: true` rather than run twice, but unread frames still replay.
    @Test func aWorkerClaimingCallsItNeverTookCannotUnstartThem() {
        var (calls, watermark) = Self.sent(Array(repeating: "put", count: 10))
        #expect(watermark.reported(1_000) == .clamped(claimed: 1_000, to: 10))
        let outcome = Self.decide(calls, watermark, unread: [8, 9, 10])
        Self.expectOneActionEach(outcome, calls)
        #expect(outcome.failures.map(\.call.number) == Array(1...7) && outcome.failures.allSatisfy(\.started))
        #expect(outcome.resent.map(\.number) == [8, 9, 10])
    }

    /// It un-takes calls it took: from then on only the kernel's witness counts, so no call it had
    /// said it took is replayed, and read frames count as started.
    @Test func aWorkerUntakingCallsCannotGetThemRunTwice() {
        var (calls, watermark) = Self.sent(Array(repeating: "put", count: 10))
        _ = watermark.reported(6)
        _ = watermark.reported(2)
        // The page after its death says 2 too: ignored.
        #expect(watermark.reported(2) == .ignored)
        let outcome = Self.decide(calls, watermark, unread: [10])
        Self.expectOneActionEach(outcome, calls)
        #expect(outcome.failures.map(\.call.number) == Array(1...9) && outcome.failures.allSatisfy(\.started))
        #expect(outcome.resent.map(\.number) == [10])
    }
}
