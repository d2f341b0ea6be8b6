#if canImport(Glibc)
import Glibc
#endif
import LinuxSupport
import Logging
import NIOCore
import PluginProtocol

extension Lifecycle {
    /// Ends a worker with SIGKILL (through its pidfd), recording why.
    func kill(_ instance: WorkerInstance, _ reason: ExitReason, _ message: String) {
        guard !instance.phase.hasExited else { return }
        if instance.killReason == nil { instance.killReason = (reason, message) }
        // A cause no restart cures is logged once, by the exit's line that follows.
        logger.log(level: reason.isPermanent ? .debug : .warning, "killing worker: \(reason.rawValue): \(message)",
                   metadata: ["plugin": "\(instance.identifier)", "pid": "\(instance.pid)"])
        instance.process.signal(SIGKILL)
    }

    /// Drops a worker that broke the protocol: it is killed and its exit recorded as `protocolViolation`.
    func protocolViolation(_ instance: WorkerInstance, _ message: String) {
        guard instance.killReason == nil else { return }
        kill(instance, .protocolViolation, message)
        instance.channel?.close(promise: nil)
    }

    /// The child watcher saw the process end. Its last frames (an `exit` notice) may still be unread
    /// in the socket, so the exit is finalized once the socket reaches EOF too (or after a short wait).
    func childExited(_ instance: WorkerInstance, _ exit: ChildExit) {
        loop.preconditionInEventLoop()
        table.workerReaped(instance)
        guard instance.move(to: .exited(afterStop: instance.phase.stopRequested), logger: logger) else { return }
        instance.exit = exit
        instance.startupDeadline?.cancel()
        if instance.socketClosed {
            finalizeExit(instance)
        } else {
            loop.assumeIsolated().scheduleTask(in: .milliseconds(250)) { [self] in finalizeExit(instance) }
        }
    }

    /// The worker's socket reached end of stream.
    func workerDisconnected(_ instance: WorkerInstance) {
        instance.connection = .closed
        router.failPending(instance, because: "\(instance.identifier) closed its connection")
        router.forgetLinks(instance)
        if instance.phase.hasExited { return finalizeExit(instance) }
        // A worker that closed its socket is on its way out (its own SIGTERM, a crash); one that
        // lingers without a socket is useless, so it gets a moment to exit and is then killed.
        guard !instance.phase.stopRequested else { return }
        prepareStandby(after: instance)
        loop.assumeIsolated().scheduleTask(in: .milliseconds(500)) { [self, weak instance] in
            if let instance, !instance.phase.hasExited {
                kill(instance, .disconnected, "the worker closed its protocol socket but did not exit")
            }
        }
    }

    /// Records the exit and acts on it: a stop completes, a crash is restarted by policy.
    func finalizeExit(_ instance: WorkerInstance) {
        guard case .exited(let afterStop) = instance.phase, let exit = instance.exit else { return }
        instance.move(to: .finalized, logger: logger)
        engine.metrics.addCPU(instance, total: exit.cpuMicroseconds)
        instance.channel?.close(promise: nil)
        router.failPending(instance, because: "\(instance.identifier) exited")
        router.forgetLinks(instance)
        let outgoing = instance.outgoing
        instance.outgoing = [:]
        router.cancelInFlight(outgoing)
        engine.hostMethods.callerEnded(instance)
        let callbacks = instance.onExit
        instance.onExit = []
        // The kernel's OOM killer in its group: the memory limit, whatever the signal says.
        let hardLimit = MemoryLimits(instance.manifest).hard
        if instance.killReason == nil, let kills = instance.cgroup?.oomKills(), kills > 0 {
            instance.killReason = (.memoryLimit, "the kernel's OOM killer ended it at its cgroup's memory limit of \(hardLimit >> 20) MiB")
        }
        // Its group goes once whatever follows (a restart) is under way: removing a v1 memory
        // group can hold the loop for a millisecond, and nothing below needs it gone. Scheduled as
        // this function ends, so the turn's flush (the restart's `load` to a standby, scheduled by
        // its write below) goes first.
        let group = instance.cgroup
        instance.cgroup = nil
        defer { if let group { loop.execute { group.remove() } } }
        // SPEC §5: the worker's private temporary folder is emptied when it ends.
        FileSystem.removeTree(instance.temporaryFolder)
        // A standby that ended before it was taken (its sandbox failed, say): the restart, if one
        // comes, spawns a worker as usual and reports what fails then.
        if let record = table[instance.identifier], record.role(of: instance) == .standby {
            logger.debug("standby worker ended: \(ExitClassifier.describe(ExitClassifier.classify(.init(exit: exit, notice: instance.exitNotice, killed: instance.killReason))))",
                         metadata: ["plugin": "\(instance.identifier)", "pid": "\(exit.pid)"])
            record.standby?.expiry.cancel()
            record.standby = nil
        }
        // An old version that drained after an update, a discarded standby, or a worker of a plugin
        // no longer known: whoever stopped it hears it ended, nothing more.
        guard let record = table[instance.identifier], let role = record.role(of: instance), role != .retiring else {
            callbacks.forEach { $0() }
            return
        }
        let facts = ExitClassifier.Facts(exit: exit, notice: instance.exitNotice, killed: instance.killReason, violation: instance.violation,
                                         stopRequested: afterStop, lastDataBytes: instance.memory.data, hardLimitBytes: hardLimit,
                                         libraryChanged: instance.library.flatMap { FileStamp(path: $0.path) != $0.stamp ? $0.path : nil })
        let status = ExitClassifier.classify(facts)
        let meta: Logger.Metadata = ["plugin": "\(record.identifier)", "pid": "\(exit.pid)"]
        let described = ExitClassifier.describe(status)
        if role == .successor {
            // A new version that ended before it took over: the update fails, the old one serves on.
            callbacks.forEach { $0() }
            return successorEnded(record, instance, described)
        }
        record.instance = nil
        record.lastExit = status
        events.exited(record, pid: exit.pid, status)
        // A standby spawned on this crash's notice is taken by an immediate restart below (the
        // scheduled restart's `adoptStandby`); whatever else follows has no use for it.
        defer { discardStandby(record, because: "\(record.identifier) is not restarted at once") }
        if record.phase == .failed(byDependency: true) {
            logger.info("\(record.identifier) stopped: \(record.problem ?? "a dependency failed")", metadata: meta)
            callbacks.forEach { $0() }
            return
        }
        if afterStop || isShuttingDown {
            record.move(to: .stopped, logger: logger)
            logger.info("\(record.identifier) stopped (\(described))", metadata: meta)
            // Whoever waited for this worker to run hears it stopped, before the stop's own
            // callbacks (a restart, an install) queue waiters for the next one.
            record.settleWaiters("stopped")
            callbacks.forEach { $0() }
            return
        }
        let abnormal = ExitClassifier.isAbnormal(facts)
        if abnormal, !instance.everRan { record.lastError = "failed to start: \(described)" }
        logger.log(level: abnormal ? .error : .notice, "\(record.identifier) exited: \(described)", metadata: meta)
        callbacks.forEach { $0() }
        // A new version that crashes soon after its update: the previous one comes back.
        if abnormal, installs.rollBackWithinGrace(record, crash: described) { return }
        if record.successor != nil {
            // An update's new version is coming up beside it: it takes over once it answers
            // `startup` (calls wait for it); if it does not, the update puts this version back.
            record.move(to: .restarting, logger: logger)
            return
        }
        if status.reason.isPermanent {
            // SPEC §6: a restart cannot cure a missing library or symbol or an ABI mismatch.
            record.move(to: .failed(byDependency: false), logger: logger)
            record.problem = "\(described); a restart cannot cure this: fix the bundle, then `supervisor restart \(record.identifier)`"
            events.failed(record)
            record.settleWaiters(record.problem)
            startWaitingPlugins()
            return
        }
        if record.installAwaitsVerdict {
            record.move(to: .failed(byDependency: false), logger: logger)
            record.problem = described
            events.failed(record)
            record.settleWaiters(described)
            return
        }
        let policy = record.manifest.restart
        guard policy == .always || (policy == .onFailure && abnormal) else {
            record.move(to: abnormal ? .failed(byDependency: false) : .stopped, logger: logger)
            record.problem = abnormal ? "exited: \(described) (restart policy \(policy.rawValue))" : nil
            if abnormal { events.failed(record) }
            record.settleWaiters(record.problem ?? "exited cleanly")
            startWaitingPlugins()
            return
        }
        scheduleRestart(record, after: described, reason: status.reason.rawValue)
    }

    /// Restarts by `restartPolicy` (backoff with jitter, the first at once, within the intensity limit).
    func scheduleRestart(_ record: PluginRecord, after described: String, reason: String) {
        switch restartPolicy.decide(history: &record.restartHistory, now: .now(), jitter: Double.random(in: 0.8...1.2)) {
        case .giveUp(let count):
            record.move(to: .failed(byDependency: false), logger: logger)
            record.problem = "restarted \(count) times in \(config.restartWindowSeconds) s; stays failed until `supervisor restart \(record.identifier)` (last exit: \(described))"
            logger.error("\(record.identifier) failed: \(record.problem!)", metadata: ["plugin": "\(record.identifier)"])
            events.failed(record)
            record.settleWaiters(record.problem)
            startWaitingPlugins()
        case .restart(let delayMs, _):
            record.restarts += 1
            engine.metrics.restarted(record.identifier, reason: reason)
            record.move(to: .restarting, logger: logger)
            events.restarting(record, delayMs: delayMs)
            logger.info("restarting \(record.identifier) in \(delayMs) ms (restart \(record.restarts))", metadata: ["plugin": "\(record.identifier)"])
            // The ready line waits for each plugin's first start, not for its restarts.
            defer { checkLaunch() }
            let go: () -> Void = { [self] in
                record.pendingRestart = nil
                guard record.phase == .restarting, record.instance == nil, !isShuttingDown else { return }
                if table.dependenciesRunning(record) {
                    if !adoptStandby(record) { spawn(record) }
                } else {
                    record.move(to: .waiting, logger: logger)
                    startWaitingPlugins()
                }
            }
            if delayMs == 0 { go() } else {
                record.pendingRestart = loop.assumeIsolated().scheduleTask(in: .milliseconds(Int64(delayMs))) { go() }
            }
        }
    }
}
