#if canImport(Glibc)
import Glibc
#endif
import LinuxSupport
import Logging
import NIOCore
import PluginProtocol
import SupervisorCore

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
        _ = instance.gate.violated(message)
        guard instance.killReason == nil else { return }
        kill(instance, .protocolViolation, message)
        instance.channel?.close(promise: nil)
    }

    /// The child watcher saw the process end. Its last frames (an `exit` notice) may still be unread
    /// in the socket, so the exit is finalized once the socket reaches EOF too (or after a short wait).
    func childExited(_ instance: WorkerInstance, _ exit: ChildExit) {
        loop.preconditionInEventLoop()
        table.workerReaped(instance)
        guard instance.move(to: .exited(afterStop: instance.phase.stopRequested, WorkerExit(exit)), logger: logger) else { return }
        instance.startSettled()
        if instance.socketClosed {
            finalizeExit(instance)
        } else {
            loop.assumeIsolated().scheduleTask(in: .milliseconds(250)) { [self] in finalizeExit(instance) }
        }
    }

    /// The worker's socket reached end of stream.
    func workerDisconnected(_ instance: WorkerInstance) {
        instance.connection = .closed
        // What it held is decided at its exit (HeldCalls.swift): replayed, retried or failed.
        instance.crash.held += instance.pending.removeAll()
        effects.post(.forgetLinks(instance))
        if instance.phase.hasExited { return finalizeExit(instance) }
        // Draining, it can answer nothing more: its stop goes on (SIGKILL: it has no socket).
        drained(instance)
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

    /// The path of the library a worker loaded, if that very file has been written over since
    /// (not one renamed over it, nor a bundle swapped by an install: those leave its mapping whole).
    static func writtenOver(_ library: (path: String, stamp: FileStamp?)?) -> String? {
        guard let library, let loaded = library.stamp, FileStamp(path: library.path)?.writtenOver(since: loaded) == true else { return nil }
        return library.path
    }

    /// Records the exit and acts on it: a stop completes, a crash is restarted by policy.
    func finalizeExit(_ instance: WorkerInstance) {
        guard case .exited(let afterStop, let exit) = instance.phase else { return }
        instance.move(to: .finalized, logger: logger)
        shared.metrics.addCPU(instance, total: exit.cpuMicroseconds)
        instance.channel?.close(promise: nil)
        instance.crash.held += instance.pending.removeAll()
        effects.post(.forgetLinks(instance))
        shared.cancelInFlight(instance.outgoing.removeAll())
        effects.post(.hostCallerEnded(instance))
        let callbacks = instance.onExit
        instance.onExit = []
        // The kernel's OOM killer in its group: the memory limit, whatever the signal says (a
        // SIGKILL the supervisor did not send; an exit of its own is no OOM kill).
        let hardLimit = MemoryLimits(instance.manifest).hard
        if instance.killReason == nil, exit.signaled, let kills = instance.cgroup?.oomKills(), kills > 0 {
            // One whose group never reached its own limit was killed for memory that ran out
            // around it (the machine, or a group the supervisor runs in): not its limit's doing.
            instance.killReason = instance.cgroup?.reachedMemoryLimit() == false
                ? (.signaled, "the kernel's OOM killer ended it: memory ran out around its group (the machine, or a group the supervisor runs in), not at its own limit of \(hardLimit >> 20) MiB")
                : (.memoryLimit, "the kernel's OOM killer ended it at its cgroup's memory limit of \(hardLimit >> 20) MiB")
        }
        // Its group and (SPEC §5) its private temporary folder go off the loop: removing a v1
        // memory group or a folder on a disk mounted with `discard` can take a millisecond each,
        // and nothing below needs them gone.
        if let group = instance.cgroup { shared.janitor.remove(group) }
        instance.cgroup = nil
        shared.janitor.removeTree(instance.temporaryFolder, renamed: !isShuttingDown)
        // A standby that ended before it was taken (its sandbox failed, say): the restart, if one
        // comes, spawns a worker as usual and reports what fails then.
        if let record = table[instance.identifier], let standby = record.standby, standby.instance === instance {
            // A kept one is not made again until the plugin's next start, so that one whose
            // sandbox cannot be had is not spawned in a loop: that is worth a warning.
            logger.log(level: standby.isKept ? .warning : .debug,
                       "standby worker ended before it was needed: \(ExitClassifier.describe(ExitClassifier.classify(.init(exit: exit, notice: instance.exitNotice, killed: instance.killReason))))",
                       metadata: ["plugin": "\(instance.identifier)", "pid": "\(exit.pid)"])
            standby.cancelExpiry()
            record.next = .none
        }
        // An old version that drained after an update, a discarded standby, or a worker of a plugin
        // no longer known: whoever stopped it hears it ended, nothing more.
        let facts = ExitClassifier.Facts(exit: exit, notice: instance.exitNotice, killed: instance.killReason, violation: instance.violation,
                                         stopRequested: afterStop, lastDataBytes: instance.memory.data, hardLimitBytes: hardLimit,
                                         libraryChanged: exit.signaled || exit.code != 0 ? Self.writtenOver(instance.library) : nil,
                                         ran: instance.everRan)
        let status = ExitClassifier.classify(facts)
        let described = ExitClassifier.describe(status)
        let known = table[instance.identifier]
        guard let record = known, let role = record.role(of: instance), role != .retiring else {
            // What it held goes to the plugin's serving worker, if it has one (an old version's
            // calls to the new one).
            _ = settleHeld(instance, of: known, crash: described)
            // An old version that served until its update switched: a worker whose `started` a
            // reader saw, so it hears it `exited` (the plugin's own `lastExit` stays as it was).
            // A discarded standby never loaded its plugin: no reader heard of it.
            if let known, known.role(of: instance) == .retiring, instance.everRan {
                events.exited(known, pid: exit.pid, status, resent: Resent())
            }
            callbacks.forEach { $0() }
            return
        }
        if role == .successor {
            // A new version that ended before it took over: the update fails, the old one serves on.
            _ = settleHeld(instance, of: record, crash: described)
            callbacks.forEach { $0() }
            return successorEnded(record, instance, described)
        }
        record.instance = nil
        // What the exit means for the plugin is its life's to decide (State/PluginLife.swift).
        let ending = PluginLife.Ending(status: status, described: described, abnormal: ExitClassifier.isAbnormal(facts),
                                       afterStop: afterStop, everRan: instance.everRan)
        var exited = Exited(pid: exit.pid, ending: ending, context: circumstances(record), callbacks: callbacks)
        let actions = record.life.workerEnded(ending, exited.context, restartPolicy: restartPolicy, now: .now, jitter: Self.jitter())
        record.idleStopping = nil
        // The calls it held, decided with the plugin's phase as its life just made it (a restart
        // comes, or never), before the actions announce the end with what became of them.
        exited.resent = settleHeld(instance, of: record, crash: described, afterStop: afterStop)
        effects.now(.life(record, actions, exited: exited))
    }

    /// A worker's end, for the actions that need it.
    struct Exited {
        var pid: Int32
        var ending: PluginLife.Ending
        var context: PluginLife.Circumstances
        var callbacks: [() -> Void]
        /// What became of the calls it held.
        var resent = Resent()
    }

    /// What the supervisor knows of `record` beside its life, for its decisions.
    func circumstances(_ record: PluginRecord) -> PluginLife.Circumstances {
        PluginLife.Circumstances(identifier: record.identifier, restartPolicy: record.manifest.restart, shuttingDown: isShuttingDown,
                                 successorComing: record.successor != nil, updateGraceOpen: record.update.withinGrace(now: .now),
                                 idleStopAfterMs: record.idleStopping, dependenciesRunning: table.dependenciesRunning(record),
                                 onCall: config.activation(of: record.manifest) == .onCall)
    }

    static func jitter() -> Double { Double.random(in: 0.8...1.2) }
}
