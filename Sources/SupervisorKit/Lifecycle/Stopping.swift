#if canImport(Glibc)
import Glibc
#endif
import LinuxSupport
import Logging
import NIOCore
import PluginProtocol
import SupervisorCore

/// Stopping plugins: one on request, or all in reverse dependency order at shutdown (`willTerminate`,
/// a grace period, then SIGKILL).
extension Lifecycle {
    func shutdown(reason: String) {
        loop.preconditionInEventLoop()
        guard startShutdownPhase() else { return }
        logger.notice("shutting down (\(reason))")
        shared.systemd.stopping()
        for record in table.all {
            record.cancelRestart()
            abandonSuccessor(record, because: "the supervisor is shutting down")
            discardStandby(record, because: "the supervisor is shutting down")
            if record.phase == .waiting || record.phase == .restarting, record.instance == nil { move(record, to: .stopped) }
            record.settleWaiters("the supervisor is shutting down")
        }
        settleReloads()
        // What waits for a plugin is answered at the timer's next tick, not when its plugin stops.
        shared.deadlines.due(.now())
        stopNextWave()
    }

    /// Stops every plugin that no live plugin depends on, then each one as soon as its last
    /// dependent has stopped (`StopOrder.Progress`). The supervisor finishes once every stop has
    /// ended and no plugin has a worker left (old versions still draining after an update too).
    func stopNextWave() {
        guard phase == .shuttingDown else { return }
        if shutdownOrder == nil {
            let live = table.all.filter { !$0.workers.isEmpty }
            var order = StopOrder.Progress(Dictionary(uniqueKeysWithValues: live.map { ($0.identifier, $0.dependencyIDs) }))
            let first = order.begin()
            shutdownOrder = order
            stopInOrder(first)
        }
        if shutdownOrder?.isDone == true, table.all.allSatisfy({ $0.workers.isEmpty }) { finish() }
    }

    /// Stops the plugins `ids` for the shutdown; as each stop ends, what it held back follows.
    /// A worker already being stopped (a restart asked before the shutdown) is waited for too:
    /// `stopPlugin` only adds to what runs when it ends.
    private func stopInOrder(_ ids: [String]) {
        for id in ids {
            let ended = { [self] in
                let next = shutdownOrder?.stopped(id) ?? []
                stopInOrder(next)
                stopNextWave()
            }
            guard let record = table[id], record.instance != nil else {
                ended()
                continue
            }
            stopPlugin(record, ended)
        }
    }

    /// Drains, then sends `willTerminate`, waits for the answer (up to the grace period), closes the
    /// socket so the worker exits, and kills it if it is still there when the grace period ends.
    /// `done` runs once its exit has been recorded.
    ///
    /// Draining (SPEC §8): from the moment the stop is asked, new requests for the plugin wait in its
    /// queue (for the next worker, or fail at shutdown); the calls already inside the worker get up
    /// to `drainTimeoutMs` to be answered before `willTerminate` goes out.
    ///
    /// A new version coming up beside it (an update) is stopped too: the update fails.
    func stopPlugin(_ record: PluginRecord, _ done: @escaping () -> Void) {
        abandonSuccessor(record, because: "\(record.identifier) was stopped before the new version took over")
        guard let instance = record.instance else { done(); return }
        stopWorker(record, instance, done)
    }

    /// Stops one worker of `record` as `stopPlugin` says: drain, `willTerminate`, grace, SIGKILL.
    func stopWorker(_ record: PluginRecord, _ instance: WorkerInstance, _ done: @escaping () -> Void) {
        instance.onExit.append(done)
        // Already reaped, not yet finalized: `done` runs when it is (calling it now would loop).
        if instance.phase.hasExited || instance.phase.stopRequested { return }
        guard instance.hello != nil, instance.channel != nil else {
            instance.move(to: .stopping, logger: logger)
            effects.post(.unlinkCallers(of: instance))
            return terminate(instance)
        }
        // Draining: the router says when its last call is settled (`drained`); the deadline ends
        // the wait otherwise. Its callers' links are taken back first (each counts as inside).
        let drainMs = config.drainTimeoutMs
        instance.move(to: .draining, logger: logger)
        effects.post(.unlinkCallers(of: instance))
        guard instance.hasCallsInside else { return drained(instance) }
        logger.info("\(record.identifier): waiting for \(instance.insideDescribed) before stopping it",
                    metadata: ["plugin": "\(record.identifier)", "pid": "\(instance.pid)"])
        loop.assumeIsolated().scheduleTask(in: .milliseconds(Int64(drainMs))) { [self, weak instance] in
            guard let instance, case .draining = instance.phase else { return }
            logger.warning("\(instance.identifier): \(instance.insideDescribed) still, after the \(drainMs) ms drain; stopping it",
                           metadata: ["plugin": "\(instance.identifier)"])
            drained(instance)
        }
    }

    /// A draining worker has no call inside any more, its socket closed, or its drain time is up:
    /// its stop goes on.
    func drained(_ instance: WorkerInstance) {
        guard case .draining = instance.phase else { return }
        instance.move(to: .stopping, logger: logger)
        terminate(instance)
    }

    /// `willTerminate` and the grace period (or SIGKILL for a worker that never said hello).
    private func terminate(_ instance: WorkerInstance) {
        let saidHello = instance.hello != nil
        let grace = TimeAmount.milliseconds(Int64(config.shutdownGraceMs))
        let hardStop = loop.assumeIsolated().scheduleTask(in: grace) { [self] in
            if !instance.phase.hasExited {
                instance.killReason = (.stopped, "did not exit within the \(config.shutdownGraceMs) ms grace period")
                instance.process.signal(SIGKILL)
            }
        }
        instance.onExit.append { hardStop.cancel() }
        if saidHello, instance.channel != nil {
            shared.sendEvent(to: instance, .willTerminate, timeoutMs: config.shutdownGraceMs) { _ in
                instance.channel?.close(promise: nil)
            }
        } else {
            instance.process.signal(SIGKILL)
        }
    }

    /// Every worker has stopped: the control socket closes and `run` returns.
    private func finish() {
        guard endShutdownPhase() else { return }
        effects.post(.stopTimers)
        effects.post(.closeControlSocket { [self] in
            logger.notice("all plugins stopped; bye")
            events.finishAll()
            finished.succeed(())
        })
    }

    /// Stops removed plugins in waves, dependents before what they depend on, as shutdown does.
    func stopRemoved(_ removed: Set<String>) {
        let records = removed.compactMap { table[$0] }
        guard !records.isEmpty else { return }
        // A reload is answered once they have stopped (`settleReloads`).
        reloads.stopping(records.map(\.identifier))
        for record in records { record.removal = .forgetting }
        // As at shutdown: each stops as soon as every removed plugin that depends on it has.
        var order = StopOrder.Progress(Dictionary(uniqueKeysWithValues: records.map { ($0.identifier, $0.dependencyIDs) }))
        func stop(_ ids: [String]) {
            for id in ids {
                guard let record = table[id] else {
                    // Gone from the table meanwhile (uninstalled): what it held back follows.
                    reloads.stopped(id)
                    stop(order.stopped(id))
                    continue
                }
                record.cancelRestart()
                stopPlugin(record) { [self] in
                    // Found again meanwhile: a new record takes its place (the forget below then
                    // leaves the table as it is, and answers what only the old one held).
                    if case .addingBack(let manifest, let refused) = record.removal {
                        // Not at shutdown: nothing starts then (what waited for it fails with the shutdown's reason).
                        if isShuttingDown { reloads.restarted(record.identifier) } else { addBack(after: record, manifest, refused: refused) }
                    }
                    record.removal = nil
                    effects.post(.forget(record, because: "\(record.identifier) was removed from the plugin folders"))
                    reloads.stopped(record.identifier)
                    stop(order.stopped(record.identifier))
                    settleReloads()
                }
            }
        }
        stop(order.begin())
    }
}
