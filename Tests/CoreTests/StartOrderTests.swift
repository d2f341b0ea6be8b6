import Testing
import SupervisorCore

/// How plugins come up, when the first start is over, and what dependents hear
/// (Starting/StartOrder.swift).
@Suite struct StartOrderTests {
    typealias P = StartOrder.Plugin

    @Test func aWaitingPluginIsSpawnedWhateverItsDependenciesDo() {
        let dep = P(identifier: "d", phase: .starting)
        #expect(StartOrder.step(for: P(identifier: "p", phase: .waiting, dependencies: ["d"]), dependencies: [dep], shuttingDown: false) == .spawn)
    }

    @Test func startupWaitsForEveryDependencyToRun() {
        let parked = P(identifier: "p", phase: .starting, dependencies: ["a", "b"], parked: true, hasWorker: true)
        let a = P(identifier: "a", phase: .running), b = P(identifier: "b", phase: .starting)
        #expect(StartOrder.step(for: parked, dependencies: [a, b], shuttingDown: false) == nil)
        #expect(StartOrder.step(for: parked, dependencies: [a, P(identifier: "b", phase: .running)], shuttingDown: false) == .startup)
        #expect(StartOrder.step(for: parked, dependencies: [a, P(identifier: "b", phase: .running)], shuttingDown: true) == nil,
                "no startup once the supervisor shuts down")
    }

    @Test func aFailedOrStoppedDependencyFailsIt() {
        let p = P(identifier: "p", phase: .waiting, dependencies: ["d"])
        #expect(StartOrder.step(for: p, dependencies: [P(identifier: "d", phase: .failed(byDependency: false))], shuttingDown: false)
            == .failByDependency(dependency: "d", phase: .failed(byDependency: false)))
        #expect(StartOrder.step(for: p, dependencies: [P(identifier: "d", phase: .stopped)], shuttingDown: false)
            == .failByDependency(dependency: "d", phase: .stopped))
        #expect(StartOrder.step(for: p, dependencies: [P(identifier: "d", phase: .stopped)], shuttingDown: true) == .spawn,
                "a dependency stopped by the shutdown fails nobody")
    }

    @Test func aDependencyNoLongerInstalledFailsIt() {
        let parked = P(identifier: "p", phase: .starting, dependencies: ["a", "gone"], parked: true, hasWorker: true)
        let a = P(identifier: "a", phase: .running)
        #expect(StartOrder.step(for: parked, dependencies: [a], shuttingDown: false) == .failByDependency(dependency: "gone", phase: nil))
        #expect(StartOrder.step(for: P(identifier: "w", phase: .waiting, dependencies: ["gone"]), dependencies: [], shuttingDown: false)
            == .failByDependency(dependency: "gone", phase: nil))
        #expect(StartOrder.step(for: parked, dependencies: [a], shuttingDown: true) == nil, "nothing fails at shutdown")
    }

    @Test func aPluginThatRunsOrHasNoParkedWorkerIsLeftAlone() {
        #expect(StartOrder.step(for: P(identifier: "p", phase: .running, hasWorker: true), dependencies: [], shuttingDown: false) == nil)
        #expect(StartOrder.step(for: P(identifier: "p", phase: .starting, hasWorker: true), dependencies: [], shuttingDown: false) == nil,
                "a worker not yet loaded gets no startup")
        #expect(StartOrder.step(for: P(identifier: "p", phase: .failed(byDependency: false)), dependencies: [], shuttingDown: false) == nil)
    }

    @Test func theFirstStartSettlesForEachPhase() {
        let none: (String) -> P? = { _ in nil }
        #expect(StartOrder.firstStartSettled(P(identifier: "p", phase: .running), lookup: none))
        #expect(StartOrder.firstStartSettled(P(identifier: "p", phase: .failed(byDependency: true)), lookup: none))
        #expect(!StartOrder.firstStartSettled(P(identifier: "p", phase: .starting), lookup: none))
        #expect(StartOrder.firstStartSettled(P(identifier: "p", phase: .restarting, hasExited: true), lookup: none),
                "a plugin that ended once does not hold the ready line for all its restarts")
    }

    @Test func aPluginWaitingForADependencyThatDidNotMakeItIsSettled() {
        let plugins = ["d": P(identifier: "d", phase: .restarting, hasExited: true), "up": P(identifier: "up", phase: .running)]
        let lookup: (String) -> P? = { plugins[$0] }
        #expect(StartOrder.firstStartSettled(P(identifier: "p", phase: .waiting, dependencies: ["d"]), lookup: lookup))
        #expect(!StartOrder.firstStartSettled(P(identifier: "q", phase: .waiting, dependencies: ["up"]), lookup: lookup),
                "its dependency runs: it will start soon")
    }

    @Test func aLoadedPluginWaitingForADependencyThatDidNotMakeItIsSettled() {
        let plugins = ["d": P(identifier: "d", phase: .restarting, hasExited: true), "slow": P(identifier: "slow", phase: .starting),
                       "up": P(identifier: "up", phase: .running)]
        let lookup: (String) -> P? = { plugins[$0] }
        // Spawned at once beside its dependency, loaded, and waiting for `startup`: it does not hold
        // the ready line through its dependency's restarts.
        #expect(StartOrder.firstStartSettled(P(identifier: "p", phase: .starting, dependencies: ["d"], parked: true, hasWorker: true), lookup: lookup))
        #expect(!StartOrder.firstStartSettled(P(identifier: "p", phase: .starting, dependencies: ["slow"], parked: true, hasWorker: true), lookup: lookup),
                "its dependency's first start is not over")
        #expect(!StartOrder.firstStartSettled(P(identifier: "p", phase: .starting, dependencies: ["d"], hasWorker: true), lookup: lookup),
                "not loaded yet: its own first start is not over")
        #expect(!StartOrder.firstStartSettled(P(identifier: "p", phase: .starting, dependencies: ["up"], parked: true, hasWorker: true), lookup: lookup),
                "its dependency runs: it gets startup")
    }

    @Test func aWaitingCycleDoesNotLoop() {
        let plugins = ["a": P(identifier: "a", phase: .waiting, dependencies: ["b"]), "b": P(identifier: "b", phase: .waiting, dependencies: ["a"])]
        #expect(!StartOrder.firstStartSettled(plugins["a"]!, lookup: { plugins[$0] }))
    }

    @Test func dependentsFailedByThisPluginTryAgainAndRunningOnesHearOfARestart() {
        let dependents = [P(identifier: "x", phase: .failed(byDependency: true), dependencies: ["up"]), P(identifier: "y", phase: .running, hasWorker: true),
                          P(identifier: "z", phase: .failed(byDependency: false))]
        let lookup: (String) -> P? = { $0 == "up" ? P(identifier: "up", phase: .running) : nil }
        #expect(StartOrder.notices(dependents: dependents, restarted: false, restartDependents: false, shuttingDown: false, lookup: lookup) == [.retry("x")])
        #expect(StartOrder.notices(dependents: dependents, restarted: true, restartDependents: false, shuttingDown: false, lookup: lookup) == [.retry("x"), .tell("y")])
        #expect(StartOrder.notices(dependents: dependents, restarted: true, restartDependents: true, shuttingDown: false, lookup: lookup) == [.retry("x"), .restart("y")])
        #expect(StartOrder.notices(dependents: dependents, restarted: false, restartDependents: false, shuttingDown: true, lookup: lookup).isEmpty)
    }

    /// One failed by two dependencies, one of which comes back: it waits for the other (tried now,
    /// it would fail again and say so again); once both run it is tried. One started on demand
    /// is not started: it waits to be needed.
    @Test func aDependentIsTriedAgainOnceNoDependencyIsDown() {
        let d = P(identifier: "d", phase: .failed(byDependency: true), dependencies: ["a", "c"])
        var phases: [String: PluginPhase] = ["a": .running, "c": .failed(byDependency: true)]
        let lookup: (String) -> P? = { id in phases[id].map { P(identifier: id, phase: $0) } }
        #expect(StartOrder.notices(dependents: [d], restarted: false, restartDependents: false, shuttingDown: false, lookup: lookup).isEmpty)
        phases["c"] = .running
        #expect(StartOrder.notices(dependents: [d], restarted: false, restartDependents: false, shuttingDown: false, lookup: lookup) == [.retry("d")])
        phases["c"] = nil
        #expect(StartOrder.notices(dependents: [d], restarted: false, restartDependents: false, shuttingDown: false, lookup: lookup).isEmpty, "one not installed holds it back")
        phases["c"] = .starting
        var lazy = d
        lazy.onCall = true
        #expect(StartOrder.notices(dependents: [lazy], restarted: false, restartDependents: false, shuttingDown: false, lookup: lookup) == [.awaitNeed("d")])
    }
}

/// When an update comes up beside the running version, and when a crash rolls it back
/// (Updating/UpdateRule.swift).
@Suite struct UpdateRuleTests {
    static func beside(shuttingDown: Bool = false, phase: PluginPhase = .running, workerRunning: Bool = true, next: UpdateRule.Next = .none,
                       deps: Bool = true) -> Bool {
        UpdateRule.canStartBeside(shuttingDown: shuttingDown, phase: phase, workerRunning: workerRunning, next: next, newDependenciesRunning: deps)
    }

    @Test func besideARunningWorkerWithNothingNext() {
        #expect(Self.beside())
        #expect(Self.beside(next: .keptStandby), "a kept standby gives way")
    }

    @Test func otherwiseStoppedAndStartedAsTheNewVersion() {
        #expect(!Self.beside(shuttingDown: true))
        #expect(!Self.beside(phase: .restarting))
        #expect(!Self.beside(workerRunning: false), "its worker is still starting or already draining")
        #expect(!Self.beside(next: .other), "another version is coming up, or a restart is under way")
        #expect(!Self.beside(deps: false), "the new version's dependencies do not run")
    }

    /// An inactive dependency activated already (its spawn waits for a turn) is waited for, not
    /// activated again: a start pass that asked again would go round for good.
    @Test func anActivatedDependencyIsWaitedFor() {
        let dependent = StartOrder.Plugin(identifier: "top", phase: .waiting, dependencies: ["lazy"])
        let asleep = StartOrder.Plugin(identifier: "lazy", phase: .inactive)
        #expect(StartOrder.step(for: dependent, dependencies: [asleep], shuttingDown: false) == .activate(dependency: "lazy"))
        var waking = asleep
        waking.activating = true
        #expect(StartOrder.step(for: dependent, dependencies: [waking], shuttingDown: false) == nil)
    }
}
