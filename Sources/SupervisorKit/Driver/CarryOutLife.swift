import Logging
import NIOCore
import SupervisorCore

extension Engine {
    /// Carries out what a plugin's life decided (`PluginLife.Action`, SupervisorCore), in order: the
    /// `.life` effect, which the lifecycle hands in at once (`Effects.now`) because what follows in
    /// its input reads the outcome (a spawned worker, a settled waiter).
    func carryOut(_ actions: [PluginLife.Action], _ record: PluginRecord, _ exited: Lifecycle.Exited?) {
        // Its phase may have changed: a reload waiting for it may be settled.
        defer { lifecycle.settleReloads() }
        let pid = exited?.pid ?? record.instance?.pid
        let meta: Logger.Metadata = pid.map { ["plugin": "\(record.identifier)", "pid": "\($0)"] } ?? ["plugin": "\(record.identifier)"]
        for action in actions {
            switch action {
            case .announceExit(let status):
                if let exited { events.exited(record, pid: exited.pid, status, resent: exited.resent) }
            case .log(let level, let message):
                logger.log(level: Logger.Level(level), "\(message)", metadata: meta)
            case .runExitCallbacks:
                exited?.callbacks.forEach { $0() }
            case .settleWaiters(let problem):
                record.settleWaiters(problem)
            case .announceFailed:
                events.failed(record)
            case .startWaitingPlugins:
                lifecycle.startWaitingPlugins()
            case .rollBackUpdate(let crash):
                // After this input, as any other component's work: the previous version goes back
                // on disk if it can, then starts; else the crash counts as any other.
                effects.post(.rollBack(record, crash: crash) { [self] rolledBack in
                    if rolledBack {
                        let version = record.manifest.version
                        lifecycle.startAgain(record) { [self] problem in
                            if let problem {
                                logger.error("\(record.identifier) \(version) did not start again after the rollback: \(problem)", metadata: meta)
                            }
                        }
                    } else if let exited {
                        carryOut(record.life.rollBackFailed(exited.ending, exited.context, restartPolicy: lifecycle.restartPolicy, now: .now,
                                                            jitter: Lifecycle.jitter()), record, exited)
                    }
                })
            case .scheduleRestart(let delayMs, let reason):
                shared.metrics.restarted(record.identifier, reason: reason)
                events.restarting(record, delayMs: delayMs)
                if delayMs == 0 { restartDue(record) } else {
                    // A standby is for an immediate restart only.
                    lifecycle.discardStandby(record, because: "\(record.identifier) is restarted after \(delayMs) ms")
                    armRestart(record, in: .milliseconds(Int64(delayMs)))
                }
            case .checkLaunch:
                lifecycle.checkLaunch()
            case .announceActivated(let trigger):
                events.activated(record, by: trigger)
            case .announceDeactivated(let idleMs):
                events.deactivated(record, idleMs: idleMs)
                // From failed or stopped (a reload found it fixed, its dependencies came back): not
                // down any more, the dependents it held back get their go.
                if idleMs == nil { lifecycle.reviveDependents(of: record) }
            case .activateIfAwaited:
                // Named by what has waited longest, as the trigger of any activation is.
                if let first = record.waiting.first { lifecycle.activate(record, by: first.trigger) }
            case .discardStandby(let reason):
                lifecycle.discardStandby(record, because: reason)
            case .spawn(let takingStandby):
                if !takingStandby || !lifecycle.adoptStandby(record) { lifecycle.spawn(record) }
            case .announceStarted:
                if let pid = record.instance?.pid { events.started(record, pid: pid) }
            case .serveAgain(let restarted):
                lifecycle.servesAgain(record, restarted: restarted)
            case .stop:
                if record.instance != nil { lifecycle.stopPlugin(record) {} }
            case .announceUpdated(let previous):
                if let pid = record.instance?.pid { events.updated(record, from: previous, pid: pid) }
            }
        }
    }

    /// A restart after its backoff delay: the timer, and when it is due (an upgrade carries what
    /// is left of it, `UpgradeSnapshot.Plugin.restartInNs`).
    func armRestart(_ record: PluginRecord, in delay: TimeAmount) {
        let task = loop.assumeIsolated().scheduleTask(in: delay) { [self] in restartDue(record) }
        record.next = .restart(task, due: .now() + delay)
    }

    private func restartDue(_ record: PluginRecord) {
        if case .restart = record.next { record.next = .none }
        carryOut(record.life.restartDue(dependenciesRunning: table.dependenciesRunning(record), hasWorker: record.instance != nil,
                                        shuttingDown: isShuttingDown), record, nil)
    }
}
