import BundleModel
import PluginProtocol

/// A plugin's life across its workers, as values: its phase, its restarts and the reasons it is not
/// running, and the rules for what a worker's end means. It decides; it does nothing. Each input is
/// a mutating method that changes the values and returns the `Action`s for the driver
/// to carry out, in order, so every rule here is tested without a process or a socket
/// (Tests/CoreTests/PluginLifeTests.swift).
package struct PluginLife: Sendable {
    package private(set) var phase: PluginPhase
    /// Restarts over the plugin's life (what `status` shows).
    package private(set) var restarts = 0
    /// When recent restarts happened, for the intensity limit.
    package var restartHistory: [Instant] = []
    package var lastExit: ExitStatus?
    /// Why it is not running, when it is not.
    package var problem: String?
    /// Why it last failed to start, or failed in a way it recovered from (an update rolled back):
    /// `status`'s `lastError` when it is not failed now.
    package var lastError: String?
    /// An install is waiting to see this version run: its first failure settles the waiters at
    /// once (to roll back) instead of going through restarts.
    package var installAwaitsVerdict = false
    /// Has reached `running` at least once (so a later start is a restart dependents hear of).
    package var hasRun = false
    /// A start on request (`supervisor restart`, an install) of a plugin that ran waits for its
    /// dependencies: the restart is counted when its worker is spawned, as it is at once when
    /// they run.
    package private(set) var restartAsked = false
    /// Coming up because it was activated (SPEC §16), until it runs: `starting`, not `restarting`.
    package private(set) var activating = false
    /// What activated it, until its worker exists: `activated` is announced then, with the
    /// worker's pid (SPEC §16), after the dependencies it waited for were announced.
    package private(set) var activatedBy: String?
    /// The version its last worker ran: a start at another version is announced `updated` (SPEC
    /// §12), however it came (an update of a plugin that was not running, a reload that found a
    /// new version on disk, an inactive plugin activated after either).
    package private(set) var ranVersion: String?

    package init(phase: PluginPhase) {
        self.phase = phase
    }

    /// The counts the previous binary kept, after an upgrade in place (Upgrade/Resume.swift): the
    /// restarts in the window (their ages at the snapshot, oldest first) count towards the
    /// intensity limit and the backoff as if no upgrade had happened. An age that is negative or
    /// older than the clock is dropped.
    package mutating func restore(restarts: Int, hasRun: Bool, restartAgesNs: [Int64] = [], ranVersion: String? = nil, now: Instant) {
        self.restarts = restarts
        self.hasRun = hasRun
        self.ranVersion = ranVersion
        restartHistory = restartAgesNs
            .filter { $0 >= 0 && UInt64($0) <= now.nanoseconds }
            .map { now.adding(nanoseconds: -$0) }
            .sorted()
    }

    /// Moves to `next` if `PluginPhase` allows it; false (and nothing changes) if not.
    package mutating func move(to next: PluginPhase) -> Bool {
        guard PluginPhase.allows(from: phase, to: next) else { return false }
        phase = next
        // Inactive again: no activation under way, the next is a new one.
        if next == .inactive { (activating, activatedBy) = (false, nil) }
        return true
    }

    // MARK: Inputs

    /// A worker in the current role ended (not a standby, a retiring old version or an update's
    /// new version: their ends do not change the plugin's life). `jitter` scales the backoff
    /// (0.8...1.2).
    package mutating func workerEnded(_ ending: Ending, _ context: Circumstances, restartPolicy: RestartPolicy, now: Instant,
                              jitter: Double) -> [Action] {
        activating = false
        let idleStop = ending.afterStop && !context.shuttingDown && context.idleStopAfterMs != nil
        // SPEC §16: an idle stop is not an exit. A clean one leaves `lastExit` as the last exit that
        // was one, and is announced as `deactivated` alone; a worker that ended badly on its way out
        // (a crash in its `destroy`, the grace period's SIGKILL) is an exit all the same.
        var actions: [Action] = []
        if !idleStop || ending.abnormal {
            lastExit = ending.status
            actions.append(.announceExit(ending.status))
        }
        // A standby spawned on this crash's notice is taken by an immediate restart only.
        let discard = Action.discardStandby(because: "\(context.identifier) is not restarted at once")
        // Asked to stop, it crashed or failed on its way out (a planned kill, the grace period's
        // or one before its hello, is a stop's: `reason` says which): a warning, not a quiet stop.
        let endedBadly = ending.abnormal && ending.status.reason != .stopped
        if phase == .failed(byDependency: true) {
            actions += [.log(.info, "\(context.identifier) stopped: \(problem ?? "a dependency failed")"), .runExitCallbacks, discard]
            // Its dependencies came back while this worker was stopping (their notice passes over
            // a plugin that still has a worker): it starts again, as it would have without one;
            // one started on demand waits to be needed again.
            if context.dependenciesRunning, !context.shuttingDown {
                if context.onCall { return actions + awaitNeed() }
                _ = move(to: .waiting)
                problem = nil
                actions += [.log(.info, "\(context.identifier) starts again: its dependencies run"), .startWaitingPlugins]
            }
            return actions
        }
        if idleStop, let idleMs = context.idleStopAfterMs {
            // SPEC §16: not a restart, not a failure, not counted by the intensity limit.
            _ = move(to: .inactive)
            problem = nil
            // 0: started only to prove that an install loads (Installs.backToInactive).
            let why = idleMs > 0 ? "stopped after \(idleMs) ms without traffic" : "stopped"
            // Announced before whoever waited for the stop hears of it: an uninstall that came
            // meanwhile is announced after, as the plugin's last event.
            let how = endedBadly ? " (its worker ended: \(ending.described))" : ""
            actions += [.log(endedBadly ? .warning : .info, "\(context.identifier) \(why)\(how); it starts again when it is needed"),
                        .announceDeactivated(idleMs: idleMs), .runExitCallbacks,
                        .discardStandby(because: "\(context.identifier) is inactive"), .activateIfAwaited]
            return actions
        }
        if ending.afterStop || context.shuttingDown {
            _ = move(to: .stopped)
            // Whoever waited for this worker to run hears it stopped before the stop's own
            // callbacks (a restart, an install) queue waiters for the next one.
            actions += [.log(endedBadly ? .warning : .info, "\(context.identifier) stopped (\(ending.described))"),
                        .settleWaiters("stopped"), .runExitCallbacks,
                        .discardStandby(because: "\(context.identifier) stopped")]
            return actions
        }
        if ending.abnormal, !ending.everRan { lastError = "failed to start: \(ending.described)" }
        actions += [.log(ending.abnormal ? .error : .notice, "\(context.identifier) exited: \(ending.described)"), .runExitCallbacks]
        // A new version that crashes soon after its update: the previous one comes back.
        if ending.abnormal, context.updateGraceOpen {
            return actions + [.rollBackUpdate(crash: ending.described), discard]
        }
        return actions + afterCrash(ending, context, restartPolicy: restartPolicy, now: now, jitter: jitter) + [discard]
    }

    /// The rollback `workerEnded` asked for could not be done: the restart policy decides.
    package mutating func rollBackFailed(_ ending: Ending, _ context: Circumstances, restartPolicy: RestartPolicy, now: Instant,
                                 jitter: Double) -> [Action] {
        afterCrash(ending, context, restartPolicy: restartPolicy, now: now, jitter: jitter)
    }

    /// A restart's delay has passed (or was 0). `hasWorker`: something else started a worker meanwhile.
    package mutating func restartDue(dependenciesRunning: Bool, hasWorker: Bool, shuttingDown: Bool) -> [Action] {
        guard phase == .restarting, !hasWorker, !shuttingDown else { return [] }
        if dependenciesRunning { return [.spawn(takingStandby: true)] }
        _ = move(to: .waiting)
        return [.startWaitingPlugins]
    }

    /// Asked to start from a clean slate (`supervisor restart`, an install, a rollback): the
    /// restart history and the failure are cleared; it starts now, or once its dependencies run.
    /// `hasWorker`: another request's worker is already coming up (two restarts asked during one
    /// drain): this one waits for it, and it counts once.
    /// `counted`: false for a start that is no restart (an update trying its new version on a
    /// plugin that was `inactive`, and its rollback: nothing ran to be restarted).
    /// `trigger`: what asked (`restart`, `update`): a plugin that is `inactive` is activated by it,
    /// and `activated` says so when its worker is spawned, as for a call (SPEC §16).
    package mutating func startRequested(dependenciesRunning: Bool, hasWorker: Bool = false, counted: Bool = true,
                                         trigger: String = "restart") -> [Action] {
        restartHistory = []
        problem = nil
        // From `inactive` an activation; from any other phase not (one that was activated, waited,
        // then was stopped, is not announced by this start).
        activatedBy = phase == .inactive ? trigger : nil
        if hasWorker { return [] }
        // From `inactive`, an activation under way until its worker is spawned (its spawn may wait
        // for a turn, `SpawnPace`).
        if phase == .inactive { activating = true }
        if dependenciesRunning {
            restartAsked = false
            if hasRun && counted { restarts += 1 }
            return [.spawn(takingStandby: false)]
        }
        // Its dependencies first (an idle-stopped one activated, a crashed one restarting): counted
        // by `workerSpawned`, once they let it spawn.
        restartAsked = hasRun && counted
        _ = move(to: .waiting)
        return [.startWaitingPlugins]
    }

    /// A rescan found its bundle changed, or no longer refused, and it starts only on demand, with
    /// no worker now (`RescanPlan.Step.awaitNeed`): `inactive` until something needs it, its
    /// restart history and failure cleared as a `restart` clears them. The programs that listen,
    /// which heard it fail or stop, hear it is inactive; what already waits for it activates it.
    package mutating func awaitNeed() -> [Action] {
        restartHistory = []
        problem = nil
        guard phase != .inactive, move(to: .inactive) else { return [] }
        return [.announceDeactivated(idleMs: nil), .activateIfAwaited]
    }

    /// Its next worker was spawned (what `.spawn` asked for): a plugin that ran before, or is
    /// coming back from a crash, is restarting; otherwise (or activated) starting. An activation
    /// is announced now that its worker (and its pid) exists.
    @discardableResult
    package mutating func workerSpawned() -> [Action] {
        if restartAsked {
            restartAsked = false
            restarts += 1
        }
        if phase == .inactive { activating = true }
        _ = move(to: !activating && (hasRun || phase == .restarting) ? .restarting : .starting)
        guard let trigger = activatedBy else { return [] }
        activatedBy = nil
        return [.announceActivated(by: trigger)]
    }

    /// Something needs an `inactive` plugin (SPEC §16): `trigger` says what (`call`, `open`,
    /// `event`, `dependent <id>`). Its worker is spawned now, or once its dependencies run (the
    /// driver activates those that are inactive, `StartOrder.Step.activate`). Not a restart: its
    /// dependents hear nothing, the intensity limit counts nothing. Nothing for any other phase.
    package mutating func activate(_ identifier: String, by trigger: String, dependenciesRunning: Bool) -> [Action] {
        // Once: its spawn may wait a turn (`SpawnPace`), and what comes meanwhile waits with it.
        guard phase == .inactive, !activating else { return [] }
        problem = nil
        activating = true
        // Announced by `workerSpawned`, with its worker's pid: now, or once its dependencies
        // (activated first, and announced first) let it spawn.
        activatedBy = trigger
        let said = Action.log(.info, "activating \(identifier): \(trigger)")
        if dependenciesRunning { return [said, .spawn(takingStandby: false)] }
        _ = move(to: .waiting)
        return [said, .startWaitingPlugins]
    }

    /// No worker could be spawned for it at all: failed, with the reason as its last exit.
    package mutating func spawnFailed(_ identifier: String, reason: String) -> [Action] {
        lastExit = ExitStatus(reason: .spawnError, message: reason)
        return [.log(.error, "\(identifier) cannot start: \(reason)")] + fail(reason)
    }

    /// Its worker answered `startup`: it runs; whoever waited hears so, and what waited goes to it.
    package mutating func workerRuns(_ identifier: String, version: String) -> [Action] {
        // An activation serves as a first start would: its dependents lost nothing they had.
        let wasRestart = hasRun && !activating
        activating = false
        _ = move(to: .running)
        problem = nil
        hasRun = true
        let updated: [Action] = ranVersion.map { $0 == version ? [] : [.announceUpdated(from: $0)] } ?? []
        ranVersion = version
        return [.log(.info, "\(identifier) \(version) is running")] + updated + [.announceStarted, .settleWaiters(nil), .serveAgain(restarted: wasRestart)]
    }

    /// An update's new version answered `startup` and serves from now on (the previous version's
    /// worker drains). The old worker may have crashed meanwhile (its calls waited for this one):
    /// it runs again either way.
    package mutating func updateTookOver(_ identifier: String, from previous: String, to version: String) -> [Action] {
        problem = nil
        ranVersion = version
        if phase != .running { _ = move(to: .running) }
        return [.log(.info, "\(identifier) \(version) is running and takes the calls; \(previous) finishes its own"),
                .announceUpdated(from: previous), .announceStarted]
    }

    /// A dependency it needs has failed, or stopped for good: it fails too (`byDependency`: it is
    /// tried again when that dependency runs), and its worker, if it has one, is stopped.
    package mutating func dependencyFailed(_ identifier: String, dependency: String, dependencyPhase: PluginPhase?, hasWorker: Bool) -> [Action] {
        _ = move(to: .failed(byDependency: true))
        // An activation that waited for this dependency did not happen.
        activatedBy = nil
        let why = "dependency \(dependency) is \(dependencyPhase?.shown ?? "not installed")"
        problem = why
        return [.log(.error, "\(identifier) will not start: \(why)"), .announceFailed] + (hasWorker ? [.stop] : []) + [.settleWaiters(why)]
    }

    /// Its serving worker is ending without being asked (it said why, or its socket closed), and
    /// has not been reaped yet: whether the restart that follows will be immediate, so that its
    /// next worker is worth spawning now, before the reap (a standby, Lifecycle/Standby.swift).
    /// Only then: it ran, nothing else is next or under way (an update, its grace, an install's
    /// verdict), the policy restarts and the window allows a restart at once, and its
    /// dependencies run. A cause no restart cures (`permanentCause`) gets none.
    package func wantsStandby(_ context: Circumstances, workerRan: Bool, permanentCause: Bool, nothingNext: Bool,
                      dependenciesRunning: Bool, restartPolicy: RestartPolicy, now: Instant) -> Bool {
        phase == .running && workerRan && !permanentCause && nothingNext && !context.shuttingDown
            && !context.successorComing && !context.updateGraceOpen && !installAwaitsVerdict
            && context.restartPolicy != .never && dependenciesRunning
            && restartPolicy.restartsAtOnce(history: restartHistory, now: now)
    }

    /// Whether a standby may be kept beside its running worker (`standbyWorkers: "always"`): it
    /// runs, nothing else is next or under way (an update's new version, an install's verdict, a
    /// shutdown), and its policy restarts it at all. Within an update's grace it may: a crash then
    /// rolls back and discards it.
    package func wantsKeptStandby(_ context: Circumstances, nothingNext: Bool) -> Bool {
        phase == .running && nothingNext && !context.shuttingDown && !context.successorComing
            && !installAwaitsVerdict && context.restartPolicy != .never
    }

    /// What cures a permanent reason: the thing at fault is not always the bundle.
    static func remedy(_ reason: ExitReason) -> String {
        switch reason {
        case .sandboxUnavailable: "give the host what the sandbox needs or change the configuration's sandbox settings (docs/sandbox.md)"
        case .badSpec: "install the supervisor and its plugin-worker together (they do not match)"
        default: "fix the bundle"
        }
    }

    // MARK: Rules

    private mutating func afterCrash(_ ending: Ending, _ context: Circumstances, restartPolicy: RestartPolicy, now: Instant,
                                     jitter: Double) -> [Action] {
        let id = context.identifier
        if context.successorComing {
            // An update's new version is coming up beside it: it takes over once it answers
            // `startup` (calls wait for it); if it does not, the update puts this version back.
            _ = move(to: .restarting)
            return []
        }
        if installAwaitsVerdict {
            // The install rolls back at once: no restarts for a version not yet accepted. Not
            // announced `failed`: the plugin does not stay down (the previous version goes back,
            // or a new one is not installed); the install's answer says why.
            _ = move(to: .failed(byDependency: false))
            problem = ending.described
            return [.settleWaiters(ending.described)]
        }
        if ending.status.reason.isPermanent {
            // SPEC §6: a restart cannot cure a missing library or symbol or an ABI mismatch.
            return fail("\(ending.described); a restart cannot cure this: \(Self.remedy(ending.status.reason)), then `supervisor restart \(id)`")
        }
        let policy = context.restartPolicy
        guard policy == .always || (policy == .onFailure && ending.abnormal) else {
            if ending.abnormal {
                return fail("exited: \(ending.described) (restart policy \(policy.rawValue))")
            }
            // One started on demand is `inactive` again (SPEC §16: no worker until something
            // needs it): its next call, or a dependent's start, starts it; a dependent does not
            // fail by it as by one stopped for good. Counted by the intensity limit as a restart
            // is: one that exits at every activation while calls wait for it would otherwise be
            // started again and again, without end.
            if context.onCall {
                if case .giveUp(let count) = restartPolicy.decide(history: &restartHistory, now: now, jitter: jitter) {
                    let why = "exited \(count + 1) times in \(restartPolicy.windowSeconds) s as it was activated; stays failed until `supervisor restart \(id)` (last exit: \(ending.described))"
                    return [.log(.error, "\(id) failed: \(why)")] + fail(why)
                }
                let history = restartHistory
                let actions: [Action] = [.settleWaiters("exited cleanly")] + awaitNeed() + [.startWaitingPlugins]
                restartHistory = history
                return actions
            }
            _ = move(to: .stopped)
            problem = nil
            return [.settleWaiters("exited cleanly"), .startWaitingPlugins]
        }
        if ending.status.reason == .dependencyRestarted {
            // Killed because a dependency restarted (`restartDependents`): not a failure of its
            // own, so at once, and not counted by the intensity limit (a dependency restarted six
            // times in a minute must not leave a healthy dependent failed).
            restarts += 1
            _ = move(to: .restarting)
            return [.log(.info, "restarting \(id) at once: a dependency restarted (restartDependents)"),
                    .scheduleRestart(delayMs: 0, reason: ending.status.reason.rawValue), .checkLaunch]
        }
        switch restartPolicy.decide(history: &restartHistory, now: now, jitter: jitter) {
        case .giveUp(let count):
            let why = "restarted \(count) times in \(restartPolicy.windowSeconds) s; stays failed until `supervisor restart \(id)` (last exit: \(ending.described))"
            return [.log(.error, "\(id) failed: \(why)")] + fail(why)
        case .restart(let delayMs, _):
            restarts += 1
            _ = move(to: .restarting)
            return [.log(.info, "restarting \(id) in \(delayMs) ms (restart \(restarts))"),
                    .scheduleRestart(delayMs: delayMs, reason: ending.status.reason.rawValue), .checkLaunch]
        }
    }

    /// Failed until asked again: said, and whoever waits hears why; dependents may now fail too.
    private mutating func fail(_ why: String) -> [Action] {
        _ = move(to: .failed(byDependency: false))
        activatedBy = nil
        problem = why
        // A version an install is trying is rolled back (or not installed): the plugin does not
        // stay down, so it is not announced and no other plugin is told; the answer says why.
        if installAwaitsVerdict { return [.settleWaiters(why)] }
        return [.announceFailed, .settleWaiters(why), .startWaitingPlugins]
    }
}
