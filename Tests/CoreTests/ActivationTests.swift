import Testing
import SupervisorCore

/// SPEC §16 as values: an `inactive` plugin's requests activate it, its activation is a first start
/// (not a restart), an idle stop makes it `inactive` again without counting as a failure, and when
/// a running plugin is idle enough to stop.
@Suite struct ActivationTests {
    static let policy = RestartPolicy(limit: 3, windowSeconds: 60, backoffBaseMs: 100, backoffMaxMs: 1_000)
    static let now = Instant(nanoseconds: 1_000_000_000_000)
    static let stopped = PluginLife.Ending(status: ExitStatus(code: 0, reason: .stopped), described: "stopped", abnormal: false,
                                           afterStop: true, everRan: true)

    static func idleContext(_ ms: Int? = 60_000, shuttingDown: Bool = false) -> PluginLife.Circumstances {
        .init(identifier: "p", restartPolicy: .onFailure, shuttingDown: shuttingDown, idleStopAfterMs: ms)
    }

    @Test func anOnCallPluginStartedOnlyToProveItsInstallStopsAgainUnlessSomethingNeedsIt() {
        #expect(IdleStop.afterItsInstall(startedOnlyToProve: true, onCall: true, phase: .running, stopping: false, busy: false))
        #expect(!IdleStop.afterItsInstall(startedOnlyToProve: true, onCall: true, phase: .running, stopping: false, busy: true),
                "a call waits for it or is inside it")
        #expect(!IdleStop.afterItsInstall(startedOnlyToProve: false, onCall: true, phase: .running, stopping: false, busy: false),
                "it ran before its update: it runs on")
        #expect(!IdleStop.afterItsInstall(startedOnlyToProve: true, onCall: false, phase: .running, stopping: false, busy: false))
        #expect(!IdleStop.afterItsInstall(startedOnlyToProve: true, onCall: true, phase: .failed(byDependency: false), stopping: false, busy: false))
        #expect(!IdleStop.afterItsInstall(startedOnlyToProve: true, onCall: true, phase: .running, stopping: true, busy: false),
                "already being stopped")
    }

    @Test func aRequestForAnInactivePluginActivatesIt() {
        let target = Route.Target(identifier: "p", phase: .inactive)
        #expect(Route.decide(target, named: "p", shuttingDown: false) == .activate)
        #expect(Route.mustWait(target, shuttingDown: false))
        #expect(Route.abandonReason(target, shuttingDown: false) == nil, "its requests wait for the activation")
        #expect(Route.decide(target, named: "p", shuttingDown: true) == .refuse(ErrorBody(.unavailable, "p is stopping: the supervisor is shutting down")))
    }

    @Test func activationSpawnsAndIsAFirstStartNotARestart() {
        var life = PluginLife(phase: .inactive)
        life.hasRun = true  // it ran before an idle stop
        let actions = life.activate("p", by: "call", dependenciesRunning: true)
        #expect(actions == [.log(.info, "activating p: call"), .spawn(takingStandby: false)])
        // Its spawn may wait a turn (SpawnPace): asked again meanwhile, nothing more, and the
        // first request stays its trigger.
        let again = life.activate("p", by: "open", dependenciesRunning: true)
        #expect(again.isEmpty && life.phase == .inactive)
        #expect(life.workerSpawned() == [.announceActivated(by: "call")], "announced once its worker (its pid) exists")
        #expect(life.phase == .starting, "an activation shows as starting, not restarting")
        let runs = life.workerRuns("p", version: "1.0.0")
        #expect(runs.contains(.serveAgain(restarted: false)), "its dependents lost nothing: no dependencyRestarted")
        #expect(life.phase == .running && life.restarts == 0)
        // Once running, an activation asked again changes nothing.
        #expect(life.activate("p", by: "call", dependenciesRunning: true).isEmpty)
    }

    @Test func aStartAskedOfAnInactivePluginIsAnActivationByWhatAsked() {
        // `supervisor restart` of an inactive plugin, an update trying its new version on one.
        for trigger in ["restart", "update"] {
            var life = PluginLife(phase: .inactive)
            life.hasRun = true
            #expect(life.startRequested(dependenciesRunning: true, counted: trigger == "restart", trigger: trigger) == [.spawn(takingStandby: false)])
            #expect(life.workerSpawned() == [.announceActivated(by: trigger)], "announced once its worker (its pid) exists")
        }
        // Waiting for its dependencies first: announced when it spawns, after theirs.
        var waiting = PluginLife(phase: .inactive)
        #expect(waiting.startRequested(dependenciesRunning: false) == [.startWaitingPlugins])
        #expect(waiting.workerSpawned() == [.announceActivated(by: "restart")])
        // From any other phase a start is no activation.
        for phase: PluginPhase in [.stopped, .failed(byDependency: false), .running] {
            var life = PluginLife(phase: phase)
            _ = life.startRequested(dependenciesRunning: true)
            #expect(life.workerSpawned().isEmpty, "\(phase)")
        }
    }

    @Test func anActivationWaitsForItsDependencies() {
        var life = PluginLife(phase: .inactive)
        let actions = life.activate("p", by: "dependent q", dependenciesRunning: false)
        #expect(life.phase == .waiting)
        #expect(actions.contains(.startWaitingPlugins) && !actions.contains(.spawn(takingStandby: false)))
        #expect(!actions.contains(.announceActivated(by: "dependent q")), "no worker, no pid yet: announced when it spawns")
        #expect(life.workerSpawned() == [.announceActivated(by: "dependent q")])
        #expect(life.phase == .starting)
    }

    @Test func anInactiveDependencyIsActivatedForItsDependent() {
        let dependent = StartOrder.Plugin(identifier: "q", phase: .waiting, dependencies: ["p"])
        let parked = StartOrder.Plugin(identifier: "q", phase: .starting, dependencies: ["p"], parked: true, hasWorker: true)
        let inactive = StartOrder.Plugin(identifier: "p", phase: .inactive)
        #expect(StartOrder.step(for: dependent, dependencies: [inactive], shuttingDown: false) == .activate(dependency: "p"))
        #expect(StartOrder.step(for: parked, dependencies: [inactive], shuttingDown: false) == .activate(dependency: "p"))
        #expect(StartOrder.firstStartSettled(inactive) { _ in nil }, "an inactive plugin does not hold the ready line")
    }

    /// Back to inactive any way (an idle stop, a rescan), an activation under way is over: the
    /// next request activates it again.
    @Test func inactiveAgainEndsTheActivation() {
        var life = PluginLife(phase: .inactive)
        _ = life.activate("p", by: "call", dependenciesRunning: false)
        #expect(life.phase == .waiting && life.activating)
        _ = life.move(to: .inactive)
        #expect(!life.activating && life.activatedBy == nil)
        let next = life.activate("p", by: "event background", dependenciesRunning: true)
        #expect(next.contains(.spawn(takingStandby: false)))
    }

    @Test func anIdleStopMakesItInactiveAndCountsNothing() {
        var life = PluginLife(phase: .starting)
        _ = life.workerRuns("p", version: "1.0.0")
        let earlier = ExitStatus(signal: "SIGSEGV", reason: .signaled)
        life.lastExit = earlier
        let actions = life.workerEnded(Self.stopped, Self.idleContext(), restartPolicy: Self.policy, now: Self.now, jitter: 1)
        #expect(life.phase == .inactive && life.problem == nil)
        #expect(life.lastExit == earlier, "not an exit: lastExit is still the last exit that was one")
        #expect(!actions.contains { if case .announceExit = $0 { true } else { false } }, "announced as deactivated alone")
        #expect(life.restarts == 0 && life.restartHistory.isEmpty, "not a restart, not counted by the intensity limit")
        #expect(actions.contains(.announceDeactivated(idleMs: 60_000)))
        // Announced before whoever waited for the stop hears of it (an uninstall's `uninstalled` comes after).
        #expect(actions.firstIndex(of: .announceDeactivated(idleMs: 60_000))! < actions.firstIndex(of: .runExitCallbacks)!)
        #expect(actions.last == .activateIfAwaited, "requests that came during its drain activate it again")
        #expect(!actions.contains(.announceFailed) && !actions.contains { if case .scheduleRestart = $0 { true } else { false } })
        // A worker that ended badly on its way out is an exit all the same; the plugin still goes inactive.
        var crashed = PluginLife(phase: .starting)
        _ = crashed.workerRuns("p", version: "1.0.0")
        let killed = PluginLife.Ending(status: ExitStatus(signal: "SIGKILL", reason: .stopped), described: "killed", abnormal: true,
                                       afterStop: true, everRan: true)
        let crashActions = crashed.workerEnded(killed, Self.idleContext(), restartPolicy: Self.policy, now: Self.now, jitter: 1)
        #expect(crashed.phase == .inactive && crashed.lastExit == killed.status && crashActions.first == .announceExit(killed.status))
        // At shutdown, an idle stop is a stop like any other.
        var other = PluginLife(phase: .starting)
        _ = other.workerRuns("p", version: "1.0.0")
        _ = other.workerEnded(Self.stopped, Self.idleContext(shuttingDown: true), restartPolicy: Self.policy, now: Self.now, jitter: 1)
        #expect(other.phase == .stopped)
    }

    @Test func aCrashDuringActivationRestartsAsACrash() {
        var life = PluginLife(phase: .inactive)
        _ = life.activate("p", by: "call", dependenciesRunning: true)
        life.workerSpawned()
        let crash = PluginLife.Ending(status: ExitStatus(signal: "SIGSEGV", reason: .signaled), described: "killed by SIGSEGV", abnormal: true,
                                      afterStop: false, everRan: false)
        let actions = life.workerEnded(crash, .init(identifier: "p", restartPolicy: .onFailure), restartPolicy: Self.policy, now: Self.now, jitter: 1)
        #expect(life.phase == .restarting && actions.contains(.scheduleRestart(delayMs: 0, reason: "signaled")))
        life.workerSpawned()
        #expect(life.phase == .restarting)
    }

    @Test func idleStopDecisions() {
        let last = Self.now
        func facts(_ phase: PluginPhase = .running, ms: Int? = 1_000, busy: Bool = false) -> IdleStop.Facts {
            .init(phase: phase, idleStopMs: ms, lastTraffic: last, busy: busy)
        }
        #expect(IdleStop.decide(facts(ms: nil), now: last + .seconds(100)) == .never)
        #expect(IdleStop.decide(facts(ms: 0), now: last + .seconds(100)) == .never)
        #expect(IdleStop.decide(facts(.starting), now: last + .seconds(100)) == .never)
        #expect(IdleStop.decide(facts(), now: last.adding(milliseconds: 400)) == .check(at: last.adding(milliseconds: 1_000)))
        #expect(IdleStop.decide(facts(), now: last.adding(milliseconds: 1_000)) == .stop(idleMs: 1_000))
        #expect(IdleStop.decide(facts(), now: last.adding(milliseconds: 2_500)) == .stop(idleMs: 2_500))
        let now = last.adding(milliseconds: 5_000)
        #expect(IdleStop.decide(facts(busy: true), now: now) == .check(at: now.adding(milliseconds: 1_000)),
                "a stream that is slow but alive, a request inside: not idle")
    }

    @Test func aLinkedPluginIsIdleOnlyAfterItsCallersWouldHaveReported() {
        let last = Self.now
        let linked = IdleStop.Facts(phase: .running, idleStopMs: 200, lastTraffic: last, busy: false, linked: true)
        // Calls over a direct link are told once a second: 200 ms without a report says nothing.
        #expect(IdleStop.decide(linked, now: last.adding(milliseconds: 900)) == .check(at: last.adding(milliseconds: IdleStop.linkReportsMs)))
        #expect(IdleStop.decide(linked, now: last.adding(milliseconds: IdleStop.linkReportsMs)) == .stop(idleMs: IdleStop.linkReportsMs))
        // A longer idleStopMs is its own.
        var long = linked
        long.idleStopMs = 10_000
        #expect(IdleStop.decide(long, now: last.adding(milliseconds: 5_000)) == .check(at: last.adding(milliseconds: 10_000)))
        long.linked = false
        #expect(IdleStop.decide(long, now: last.adding(milliseconds: 10_000)) == .stop(idleMs: 10_000))
    }
}
