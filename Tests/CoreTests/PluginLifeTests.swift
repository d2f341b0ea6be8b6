import Testing
import SupervisorCore

/// A plugin's life as values (State/PluginLife.swift): each input with its facts, and the actions
/// and phase that come out, without a process, a socket or an event loop.
@Suite struct PluginLifeTests {
    static let policy = RestartPolicy(limit: 3, windowSeconds: 60, backoffBaseMs: 100, backoffMaxMs: 1_000)
    static let now = Instant(nanoseconds: 1_000_000_000_000)

    static func crash(everRan: Bool = true) -> PluginLife.Ending {
        .init(status: ExitStatus(signal: "SIGSEGV", reason: .signaled), described: "killed by SIGSEGV", abnormal: true, afterStop: false, everRan: everRan)
    }

    static let clean = PluginLife.Ending(status: ExitStatus(code: 0, reason: .exited), described: "exited with code 0", abnormal: false,
                                         afterStop: false, everRan: true)

    static func context(_ policy: Manifest.RestartPolicy = .onFailure, shuttingDown: Bool = false, successorComing: Bool = false,
                        updateGraceOpen: Bool = false) -> PluginLife.Circumstances {
        .init(identifier: "p", restartPolicy: policy, shuttingDown: shuttingDown, successorComing: successorComing, updateGraceOpen: updateGraceOpen)
    }

    static func running() -> PluginLife {
        var life = PluginLife(phase: .starting)
        _ = life.move(to: .running)
        life.hasRun = true
        return life
    }

    func ended(_ life: inout PluginLife, _ ending: PluginLife.Ending = crash(), _ context: PluginLife.Circumstances = context(),
               at now: Instant = now) -> [PluginLife.Action] {
        life.workerEnded(ending, context, restartPolicy: Self.policy, now: now, jitter: 1)
    }

    static func restarted(_ delayMs: Int) -> PluginLife.Action { .scheduleRestart(delayMs: delayMs, reason: "signaled") }

    // MARK: Crashes and restarts

    @Test func aCrashIsRestartedAtOnceThenWithBackoffThenGivenUp() {
        var life = Self.running()
        let first = ended(&life)
        #expect(first.first == .announceExit(Self.crash().status))
        #expect(first.contains(Self.restarted(0)))
        #expect(first.contains(.checkLaunch))
        #expect(life.phase == .restarting && life.restarts == 1)
        // The standby goes last, once the restart had its chance to take it.
        #expect(first.last == .discardStandby(because: "p is not restarted at once"))
        #expect(life.restartDue(dependenciesRunning: true, hasWorker: false, shuttingDown: false) == [.spawn(takingStandby: true)])

        _ = life.move(to: .running)
        #expect(ended(&life, at: Self.now + .seconds(1)).contains(Self.restarted(100)))
        _ = life.move(to: .running)
        #expect(ended(&life, at: Self.now + .seconds(2)).contains(Self.restarted(200)))
        _ = life.move(to: .running)
        let last = ended(&life, at: Self.now + .seconds(3))
        #expect(life.phase == .failed(byDependency: false))
        #expect(life.problem?.hasPrefix("restarted 3 times in 60 s") == true)
        #expect(last.contains(.announceFailed) && last.contains(.startWaitingPlugins))
        #expect(!last.contains { if case .scheduleRestart = $0 { return true } else { return false } })
        #expect(life.restarts == 3)
    }

    /// A plugin that failed by its crash loop, started on demand: a rescan that finds it fixed
    /// leaves it `inactive`, its history cleared (the next crash is restarted at once, as after a
    /// `restart`); what waits for it activates it. An inactive one stays as it is.
    @Test func awaitingNeedAfterAFailure() {
        var life = Self.running()
        for second in 0..<4 {
            _ = ended(&life, at: Self.now + .seconds(Int64(second)))
            _ = life.move(to: .running)
        }
        #expect(life.phase == .failed(byDependency: false) && life.problem != nil && !life.restartHistory.isEmpty)
        #expect(life.awaitNeed() == [.announceDeactivated(idleMs: nil), .activateIfAwaited])
        #expect(life.phase == .inactive && life.problem == nil && life.restartHistory.isEmpty)
        #expect(life.awaitNeed().isEmpty && life.phase == .inactive)
    }

    @Test func restartsOutsideTheWindowDoNotCount() {
        var life = Self.running()
        for second in [0, 61, 122, 183] {
            _ = life.move(to: .running)
            #expect(ended(&life, at: Self.now + .seconds(Int64(second))).contains(Self.restarted(0)))
        }
        #expect(life.restarts == 4)
    }

    /// An upgrade in place carries the restarts in the window: the backoff and the limit go on
    /// from them (a crash-looping plugin gets no fresh allowance from an upgrade).
    @Test func restartsRestoredAfterAnUpgradeCountTowardsTheLimit() {
        var life = PluginLife(phase: .starting)
        _ = life.move(to: .running)
        // Two restarts 50 and 10 s before, one older than the window, an age that cannot be.
        life.restore(restarts: 7, hasRun: true, restartAgesNs: [10_000_000_000, 50_000_000_000, 90_000_000_000, -5],
                     now: Self.now)
        #expect(life.restarts == 7 && life.hasRun)
        #expect(life.restartHistory == [Self.now - .seconds(90), Self.now - .seconds(50), Self.now - .seconds(10)])
        // The third restart in the window, with the backoff of the third.
        #expect(ended(&life).contains(Self.restarted(200)))
        _ = life.move(to: .running)
        let last = ended(&life, at: Self.now + .seconds(1))
        #expect(life.phase == .failed(byDependency: false))
        #expect(life.problem?.hasPrefix("restarted 3 times in 60 s") == true)
        #expect(!last.contains { if case .scheduleRestart = $0 { return true } else { return false } })
    }

    @Test func aFailedStartIsTheLastError() {
        var life = PluginLife(phase: .starting)
        _ = ended(&life, Self.crash(everRan: false))
        #expect(life.lastError == "failed to start: killed by SIGSEGV")
    }

    @Test func aPermanentReasonIsNotRestarted() {
        var life = Self.running()
        let ending = PluginLife.Ending(status: ExitStatus(code: 78, reason: .missingSymbol), described: "missing symbol sp_plugin_create",
                                       abnormal: true, afterStop: false, everRan: false)
        let actions = ended(&life, ending, Self.context(.always))
        #expect(life.phase == .failed(byDependency: false))
        #expect(life.problem?.contains("a restart cannot cure this") == true)
        #expect(actions.contains(.settleWaiters(life.problem)))
        #expect(life.restarts == 0)
    }

    @Test(arguments: [Manifest.RestartPolicy.never, .onFailure])
    func aCleanExitStopsUnlessAlways(_ policy: Manifest.RestartPolicy) {
        var life = Self.running()
        life.problem = "old"
        let actions = ended(&life, Self.clean, Self.context(policy))
        #expect(life.phase == .stopped && life.problem == nil)
        #expect(actions.contains(.settleWaiters("exited cleanly")))
        var always = Self.running()
        #expect(ended(&always, Self.clean, Self.context(.always)).contains(.scheduleRestart(delayMs: 0, reason: "exited")))
    }

    /// SPEC §16: a plugin started on demand whose worker exits cleanly (a SIGTERM from outside, an
    /// `exit(0)`) is `inactive` again, not stopped for good: the next call starts it.
    @Test(arguments: [Manifest.RestartPolicy.never, .onFailure])
    func aCleanExitOfAnOnCallPluginLeavesItInactive(_ policy: Manifest.RestartPolicy) {
        var life = Self.running()
        var context = Self.context(policy)
        context.onCall = true
        let actions = ended(&life, Self.clean, context)
        #expect(life.phase == .inactive && life.problem == nil)
        #expect(actions.contains(.settleWaiters("exited cleanly")))
        #expect(actions.contains(.announceDeactivated(idleMs: nil)) && actions.contains(.activateIfAwaited))
        #expect(life.restarts == 0, "not a restart")
        // What waits for it activates it, as a first start.
        let woken = life.activate("p", by: "call", dependenciesRunning: true)
        #expect(woken.contains(.spawn(takingStandby: false)) || woken.contains(.spawn(takingStandby: true)), "\(woken)")
    }

    /// An onCall plugin whose worker exits cleanly each time it is activated (calls keep waiting
    /// for it) reaches the intensity limit, as a crash loop does: it fails rather than loop.
    @Test func anOnCallPluginThatExitsAtEveryActivationFails() {
        var life = Self.running()
        var context = Self.context(.onFailure)
        context.onCall = true
        for n in 1...Self.policy.limit {
            _ = ended(&life, Self.clean, context)
            #expect(life.phase == .inactive, "exit \(n)")
            _ = life.activate("p", by: "call", dependenciesRunning: true)
            _ = life.workerSpawned()
            _ = life.workerRuns("p", version: "1.0.0")
        }
        let actions = ended(&life, Self.clean, context)
        #expect(life.phase == .failed(byDependency: false), "\(life.phase)")
        #expect(life.problem?.contains("exited \(Self.policy.limit + 1) times in 60 s as it was activated") == true, "\(life.problem ?? "")")
        #expect(actions.contains(.settleWaiters(life.problem)))
    }

    @Test func aCrashUnderNeverFails() {
        var life = Self.running()
        let actions = ended(&life, Self.crash(), Self.context(.never))
        #expect(life.phase == .failed(byDependency: false))
        #expect(life.problem == "exited: killed by SIGSEGV (restart policy never)")
        #expect(actions.contains(.announceFailed))
    }

    @Test func aRestartWaitsForItsDependencies() {
        var life = Self.running()
        _ = ended(&life)
        #expect(life.restartDue(dependenciesRunning: false, hasWorker: false, shuttingDown: false) == [.startWaitingPlugins])
        #expect(life.phase == .waiting)
    }

    @Test func aRestartThatIsNoLongerWantedDoesNothing() {
        var life = Self.running()
        _ = ended(&life)
        #expect(life.restartDue(dependenciesRunning: true, hasWorker: true, shuttingDown: false).isEmpty)
        #expect(life.restartDue(dependenciesRunning: true, hasWorker: false, shuttingDown: true).isEmpty)
        _ = life.move(to: .stopped)
        #expect(life.restartDue(dependenciesRunning: true, hasWorker: false, shuttingDown: false).isEmpty)
        #expect(life.phase == .stopped)
    }

    // MARK: Stops

    @Test func anExitAfterAStopIsAStop() {
        var life = Self.running()
        let ending = PluginLife.Ending(status: ExitStatus(reason: .stopped), described: "stopped", abnormal: false, afterStop: true, everRan: true)
        let actions = ended(&life, ending)
        #expect(life.phase == .stopped)
        // Waiters hear it stopped before the stop's callbacks queue new ones.
        let settle = actions.firstIndex(of: .settleWaiters("stopped")), callbacks = actions.firstIndex(of: .runExitCallbacks)
        #expect(settle != nil && callbacks != nil && settle! < callbacks!)
        #expect(life.restarts == 0)
    }

    @Test func aKillForARestartedDependencyIsNotCountedByTheIntensityLimit() {
        var life = Self.running()
        let killed = PluginLife.Ending(status: ExitStatus(signal: "SIGKILL", reason: .dependencyRestarted), described: "dependencyRestarted",
                                       abnormal: true, afterStop: false, everRan: true)
        for round in 1...10 {
            let actions = ended(&life, killed, Self.context(), at: Self.now.adding(milliseconds: round * 1_000))
            #expect(actions.contains(.scheduleRestart(delayMs: 0, reason: "dependencyRestarted")), "round \(round): \(actions)")
            #expect(life.phase == .restarting)
            _ = life.workerRuns("p", version: "1.0.0")
        }
        #expect(life.restarts == 10)
        // Its own crash afterwards is its first in the window: restarted at once.
        #expect(ended(&life, Self.crash(), Self.context(), at: Self.now.adding(milliseconds: 11_000)).contains(Self.restarted(0)))
    }

    @Test func aCrashDuringShutdownIsNotRestarted() {
        var life = Self.running()
        _ = ended(&life, Self.crash(), Self.context(.always, shuttingDown: true))
        #expect(life.phase == .stopped && life.restarts == 0)
    }

    @Test func theEndOfAPluginFailedByItsDependencyChangesNothing() {
        var life = Self.running()
        _ = life.move(to: .failed(byDependency: true))
        life.problem = "its dependency q failed"
        let actions = ended(&life)
        #expect(life.phase == .failed(byDependency: true))
        #expect(actions.contains(.runExitCallbacks))
        #expect(!actions.contains(.settleWaiters("stopped")))
    }

    // MARK: Mixed cases

    @Test func aCrashDuringAnUpdateWaitsForTheNewVersion() {
        var life = Self.running()
        let actions = ended(&life, Self.crash(), Self.context(.always, successorComing: true))
        #expect(life.phase == .restarting)
        #expect(life.restarts == 0)
        #expect(!actions.contains { if case .scheduleRestart = $0 { return true } else { return false } })
        #expect(!actions.contains(.announceFailed))
    }

    @Test func aCrashWithinAnUpdatesGraceRollsBackAndOnlyThenRestarts() {
        var life = Self.running()
        let actions = ended(&life, Self.crash(), Self.context(updateGraceOpen: true))
        #expect(actions.contains(.rollBackUpdate(crash: "killed by SIGSEGV")))
        #expect(life.phase == .running && life.restarts == 0)  // the rollback starts it again
        // The rollback could not be done: the restart policy decides, as for any crash.
        let after = life.rollBackFailed(Self.crash(), Self.context(), restartPolicy: Self.policy, now: Self.now, jitter: 1)
        #expect(after.contains(Self.restarted(0)))
        #expect(life.phase == .restarting)
    }

    @Test func aCleanExitWithinTheGraceIsNotRolledBack() {
        var life = Self.running()
        let actions = ended(&life, Self.clean, Self.context(updateGraceOpen: true))
        #expect(!actions.contains { if case .rollBackUpdate = $0 { return true } else { return false } })
    }

    @Test func anInstallAwaitingItsVerdictFailsAtOnce() {
        var life = PluginLife(phase: .starting)
        life.installAwaitsVerdict = true
        let actions = ended(&life, Self.crash(everRan: false), Self.context(.always))
        #expect(life.phase == .failed(byDependency: false))
        #expect(actions.contains(.settleWaiters("killed by SIGSEGV")))
        #expect(life.restarts == 0)
        // No other plugin is told: the install rolls back and puts the old one in service.
        #expect(!actions.contains(.startWaitingPlugins))
        // Nor is it announced `failed` ("stays down until restarted by hand" would be untrue).
        #expect(!actions.contains(.announceFailed))
    }

    @Test func aVersionAnInstallTriesIsNeverAnnouncedFailed() {
        // A reason a restart cannot cure, in the version tried: rolled back all the same, unannounced.
        var permanent = PluginLife(phase: .starting)
        permanent.installAwaitsVerdict = true
        let ending = PluginLife.Ending(status: ExitStatus(code: 78, reason: .missingSymbol), described: "missing symbol sp_plugin_create",
                                       abnormal: true, afterStop: false, everRan: false)
        let actions = ended(&permanent, ending, Self.context(.always))
        #expect(actions.contains(.settleWaiters("missing symbol sp_plugin_create")) && !actions.contains(.announceFailed))
        #expect(!actions.contains(.startWaitingPlugins) && permanent.restarts == 0)
        // A worker that cannot even be spawned for it.
        var unspawned = PluginLife(phase: .starting)
        unspawned.installAwaitsVerdict = true
        #expect(unspawned.spawnFailed("p", reason: "no such file") == [.log(.error, "p cannot start: no such file"), .settleWaiters("no such file")])
        #expect(unspawned.phase == .failed(byDependency: false), "until the install puts the previous version back")
    }

    // MARK: Running, and dependencies

    @Test func itRunsAndWhatWaitedGoesToIt() {
        var life = PluginLife(phase: .starting)
        life.problem = "an old problem"
        #expect(life.workerRuns("p", version: "1.0.0") == [.log(.info, "p 1.0.0 is running"), .announceStarted, .settleWaiters(nil),
                                                         .serveAgain(restarted: false)])
        #expect(life.phase == .running && life.hasRun && life.problem == nil)
        // The next time it is a restart: its dependents hear of it.
        _ = ended(&life)
        #expect(life.workerRuns("p", version: "1.0.0").last == .serveAgain(restarted: true))
    }

    @Test func aStartAtAnotherVersionIsAnnouncedUpdated() {
        var life = PluginLife(phase: .starting)
        _ = life.workerRuns("p", version: "1.0.0")
        // The same version again (a restart, an activation after an idle stop): no update.
        _ = ended(&life)
        #expect(!life.workerRuns("p", version: "1.0.0").contains(.announceUpdated(from: "1.0.0")))
        // Another version on disk (a reload, an update of a plugin that was not running): announced
        // before `started`, as an update's take-over is; the take-over's version counts as run.
        _ = ended(&life)
        #expect(Array(life.workerRuns("p", version: "1.1.0").dropFirst().prefix(2)) == [.announceUpdated(from: "1.0.0"), .announceStarted])
        _ = life.updateTookOver("p", from: "1.1.0", to: "2.0.0")
        _ = ended(&life)
        #expect(!life.workerRuns("p", version: "2.0.0").contains(.announceUpdated(from: "1.1.0")))
        #expect(life.ranVersion == "2.0.0")
    }

    @Test func aFailedDependencyFailsItAndStopsItsWorker() {
        var life = PluginLife(phase: .starting)
        let actions = life.dependencyFailed("p", dependency: "q", dependencyPhase: .failed(byDependency: false), hasWorker: true)
        #expect(life.phase == .failed(byDependency: true))
        #expect(life.problem == "dependency q is failed")
        #expect(actions == [.log(.error, "p will not start: dependency q is failed"), .announceFailed, .stop, .settleWaiters("dependency q is failed")])
        var waiting = PluginLife(phase: .waiting)
        #expect(!waiting.dependencyFailed("p", dependency: "q", dependencyPhase: .stopped, hasWorker: false).contains(.stop))
    }

    @Test func aDependencyMissingFailsItAsNotInstalled() {
        var life = PluginLife(phase: .waiting)
        _ = life.dependencyFailed("p", dependency: "gone", dependencyPhase: nil, hasWorker: false)
        #expect(life.phase == .failed(byDependency: true) && life.problem == "dependency gone is not installed")
    }

    @Test func failedByADependencyThatCameBackWhileItsWorkerStoppedItStartsAgain() {
        let stopped = PluginLife.Ending(status: ExitStatus(reason: .stopped), described: "stopped", abnormal: false, afterStop: true, everRan: false)
        var back = PluginLife(phase: .starting)
        _ = back.dependencyFailed("p", dependency: "q", dependencyPhase: .failed(byDependency: false), hasWorker: true)
        var context = Self.context()
        context.dependenciesRunning = true
        let actions = ended(&back, stopped, context)
        #expect(back.phase == .waiting && back.problem == nil)
        #expect(actions.last == .startWaitingPlugins)
        // Started on demand, it waits to be needed instead.
        var lazy = PluginLife(phase: .starting)
        _ = lazy.dependencyFailed("p", dependency: "q", dependencyPhase: .failed(byDependency: false), hasWorker: true)
        var onCall = Self.context()
        onCall.dependenciesRunning = true
        onCall.onCall = true
        let waits = ended(&lazy, stopped, onCall)
        #expect(lazy.phase == .inactive && lazy.problem == nil && waits.contains(.announceDeactivated(idleMs: nil)) && !waits.contains(.startWaitingPlugins))
        // Its dependency is still down: it stays failed by it.
        var still = PluginLife(phase: .starting)
        _ = still.dependencyFailed("p", dependency: "q", dependencyPhase: .failed(byDependency: false), hasWorker: true)
        #expect(!ended(&still, stopped).contains(.startWaitingPlugins))
        #expect(still.phase == .failed(byDependency: true) && still.problem == "dependency q is failed")
        // Nor at shutdown.
        var shutdown = PluginLife(phase: .starting)
        _ = shutdown.dependencyFailed("p", dependency: "q", dependencyPhase: .failed(byDependency: false), hasWorker: true)
        context.shuttingDown = true
        _ = ended(&shutdown, stopped, context)
        #expect(shutdown.phase == .failed(byDependency: true))
    }

    @Test func anUpdateTakesOverEvenAfterTheOldWorkerCrashed() {
        var life = Self.running()
        life.problem = "an old problem"
        #expect(life.updateTookOver("p", from: "1.0.0", to: "2.0.0") == [.log(.info, "p 2.0.0 is running and takes the calls; 1.0.0 finishes its own"),
                                                                          .announceUpdated(from: "1.0.0"), .announceStarted])
        #expect(life.phase == .running && life.problem == nil)
        // The old worker crashed while the new version started: restarting, no restart scheduled;
        // the new version's take-over makes it run again.
        var crashed = Self.running()
        _ = ended(&crashed, Self.crash(), Self.context(successorComing: true))
        #expect(crashed.phase == .restarting)
        _ = crashed.updateTookOver("p", from: "1.0.0", to: "2.0.0")
        #expect(crashed.phase == .running && crashed.restarts == 0)
    }

    // MARK: Standby

    func wantsStandby(_ life: PluginLife, _ context: PluginLife.Circumstances = context(), workerRan: Bool = true,
                      permanentCause: Bool = false, nothingNext: Bool = true, dependenciesRunning: Bool = true,
                      at now: Instant = now) -> Bool {
        life.wantsStandby(context, workerRan: workerRan, permanentCause: permanentCause, nothingNext: nothingNext,
                          dependenciesRunning: dependenciesRunning, restartPolicy: Self.policy, now: now)
    }

    /// A standby worker is spawned ahead of a restart only when that restart will be immediate.
    @Test func aStandbyOnlyForAnImmediateRestart() {
        let life = Self.running()
        #expect(wantsStandby(life))
        #expect(!wantsStandby(life, workerRan: false))  // a failed start: its exit decides
        #expect(!wantsStandby(life, permanentCause: true))
        #expect(!wantsStandby(life, nothingNext: false))  // an update's new version, a standby already
        #expect(!wantsStandby(life, dependenciesRunning: false))
        #expect(!wantsStandby(life, Self.context(.never)))
        #expect(!wantsStandby(life, Self.context(shuttingDown: true)))
        #expect(!wantsStandby(life, Self.context(successorComing: true)))
        #expect(!wantsStandby(life, Self.context(updateGraceOpen: true)))  // a crash may roll back
        var verdict = life
        verdict.installAwaitsVerdict = true
        #expect(!wantsStandby(verdict))
        // After a restart in the window, the next would wait for its backoff: no standby.
        var restarted = Self.running()
        _ = ended(&restarted)
        _ = restarted.move(to: .running)
        #expect(!wantsStandby(restarted, at: Self.now + .seconds(1)))
        #expect(wantsStandby(restarted, at: Self.now + .seconds(61)))
        var failed = life
        _ = failed.move(to: .failed(byDependency: false))
        #expect(!wantsStandby(failed))
    }

    /// A kept standby (`standbyWorkers: "always"`) waits beside a settled running plugin, whatever
    /// its restart history (it is taken by the next immediate restart, discarded by a delayed one).
    @Test func aKeptStandbyBesideASettledPlugin() {
        let life = Self.running()
        #expect(life.wantsKeptStandby(Self.context(), nothingNext: true))
        #expect(!life.wantsKeptStandby(Self.context(), nothingNext: false))  // one already, a restart's timer, an update
        #expect(!life.wantsKeptStandby(Self.context(.never), nothingNext: true))  // nothing would take it
        #expect(!life.wantsKeptStandby(Self.context(shuttingDown: true), nothingNext: true))
        #expect(!life.wantsKeptStandby(Self.context(successorComing: true), nothingNext: true))
        #expect(life.wantsKeptStandby(Self.context(updateGraceOpen: true), nothingNext: true))  // a crash rolls back and discards it
        var verdict = life
        verdict.installAwaitsVerdict = true
        #expect(!verdict.wantsKeptStandby(Self.context(), nothingNext: true))
        var restarted = Self.running()
        _ = ended(&restarted)
        #expect(!restarted.wantsKeptStandby(Self.context(), nothingNext: true))  // restarting: after it runs
        _ = restarted.move(to: .running)
        #expect(restarted.wantsKeptStandby(Self.context(), nothingNext: true))
        var failed = life
        _ = failed.move(to: .failed(byDependency: false))
        #expect(!failed.wantsKeptStandby(Self.context(), nothingNext: true))
    }

    // MARK: Starting on request

    @Test func aStartOnRequestClearsTheSlate() {
        var life = Self.running()
        for second in 0..<4 {
            _ = life.move(to: .running)
            _ = ended(&life, at: Self.now + .seconds(Int64(second)))
        }
        #expect(life.phase == .failed(byDependency: false))
        #expect(life.startRequested(dependenciesRunning: true) == [.spawn(takingStandby: false)])
        #expect(life.problem == nil && life.restartHistory.isEmpty)
        #expect(life.restarts == 4)  // three restarts by policy, the fourth on request
        var waiting = PluginLife(phase: .stopped)
        #expect(waiting.startRequested(dependenciesRunning: false) == [.startWaitingPlugins])
        #expect(waiting.phase == .waiting && waiting.restarts == 0)
    }

    /// `supervisor restart` of a plugin that ran, whose dependency is not running (idle-stopped,
    /// restarting): it waits for it, and its restart counts once its worker is spawned.
    @Test func aRestartThatWaitsForItsDependenciesCountsWhenItSpawns() {
        var life = Self.running()
        let stopped = PluginLife.Ending(status: ExitStatus(reason: .stopped), described: "stopped", abnormal: false, afterStop: true, everRan: true)
        _ = ended(&life, stopped)
        #expect(life.startRequested(dependenciesRunning: false) == [.startWaitingPlugins])
        #expect(life.phase == .waiting && life.restarts == 0)
        life.workerSpawned()
        #expect(life.restarts == 1 && life.phase == .restarting)
        _ = life.workerRuns("p", version: "1.0.0")
        life.workerSpawned()
        #expect(life.restarts == 1, "counted once")
        var fresh = PluginLife(phase: .stopped)
        _ = fresh.startRequested(dependenciesRunning: false)
        fresh.workerSpawned()
        #expect(fresh.restarts == 0, "a plugin that never ran is not restarted")
    }

    /// Two restarts asked while the worker drains: the first one's worker comes up once the old
    /// one has ended; the second finds it coming up and waits for it. One restart, counted once.
    @Test func aSecondRestartDuringTheDrainJoinsTheFirst() {
        var life = Self.running()
        let stopped = PluginLife.Ending(status: ExitStatus(reason: .stopped), described: "stopped", abnormal: false, afterStop: true, everRan: true)
        _ = ended(&life, stopped)
        #expect(life.startRequested(dependenciesRunning: true) == [.spawn(takingStandby: false)])
        _ = life.move(to: .restarting)
        #expect(life.startRequested(dependenciesRunning: true, hasWorker: true).isEmpty)
        #expect(life.restarts == 1 && life.phase == .restarting)
    }

    @Test func aSpawnThatFailsIsTheLastExit() {
        var life = PluginLife(phase: .waiting)
        let actions = life.spawnFailed("p", reason: "no such file")
        #expect(life.phase == .failed(byDependency: false))
        #expect(life.lastExit == ExitStatus(reason: .spawnError, message: "no such file"))
        #expect(actions == [.log(.error, "p cannot start: no such file"), .announceFailed, .settleWaiters("no such file"), .startWaitingPlugins])
    }
}
