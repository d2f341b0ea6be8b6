#if canImport(Glibc)
import Glibc
#endif
import Bundles
import LinuxSupport
import Logging
import NIOCore
import NIOPosix
import PluginProtocol
import Protocol
import SupervisorCore

/// The new binary's side of an upgrade in place (Upgrade.swift has the old one's): the plugins the
/// folders hold are read as at any start, then each worker of the snapshot is taken over as it
/// runs (its pid, pidfd, sockets, cgroup, sandbox facts, restarts), and so are the control
/// clients (with what they follow, provide and hold), the links between them and the notifier's
/// listeners. Plugins that were waiting for a restart start now; nothing else is spawned, and no
/// plugin hears anything.
extension Engine {
    func resume(_ handover: UpgradeHandover) {
        loop.preconditionInEventLoop()
        let s = handover.snapshot
        // Close-on-exec again: the next exec hands over only what the next snapshot names.
        try? InPlaceExec.keepAcrossExec(s.descriptors, false)
        upgrades = s.upgrades + (handover.failure == nil ? 1 : 0)
        router.nextLinkNumber = s.nextLinkNumber
        if let old = s.oldForkServer {
            // Its socket closed with the exec: it is ending. Reaped here; this binary has its own.
            let process = ChildProcess.adopt(pid: old.pid, pidfd: OwnedDescriptor(old.pidfd))
            try? shared.watcher?.watch(process) { _ in }
        }
        shared.phase = s.launched ? .launched : .starting
        for saved in s.plugins {
            guard let record = table[saved.identifier] else {
                // Its folder is gone: the running worker goes as a removed plugin's would.
                if let w = saved.worker { endOrphan(w, saved.identifier) }
                continue
            }
            record.life.restore(restarts: saved.restarts, hasRun: saved.hasRun, restartAgesNs: saved.restartAgesNs ?? [],
                                ranVersion: saved.worker?.version ?? (saved.hasRun ? record.manifest.version.description : nil), now: .now)
            record.problem = saved.problem
            record.lastError = saved.lastError
            record.life.lastExit = saved.lastExit
            record.sandboxDenials = saved.sandboxDenials
            // Idle for as long as it was (the pause of the handover counts, as any other moment).
            if let idle = saved.idleNs { record.lastTraffic = .now() - .nanoseconds(max(0, idle)) }
            // Its phase as the previous binary left it (the snapshot's `Phase` says which): a running
            // plugin's worker is adopted; one whose restart was waiting restarts when its delay ends.
            if saved.phase == .running, let w = saved.worker {
                adoptWorker(record, w)
            } else if saved.phase == .restarting, let left = saved.restartInNs, left > 0, PluginPhase.allows(from: record.phase, to: .restarting) {
                // Its backoff goes on where the previous binary left it.
                _ = record.move(to: .restarting, logger: logger)
                // No longer than this binary's longest delay: a snapshot's number is not a promise.
                armRestart(record, in: .nanoseconds(min(left, Int64(config.restartBackoffMaxMs) * 1_000_000)))
            } else if let phase = saved.phase.restored, record.phase != phase {
                _ = record.move(to: phase, logger: logger)
                if phase.isFailed { record.problem = saved.problem }
            }
        }
        for held in s.notifier { watchFilter(pid: held.pid, fd: held.fd, isListener: held.isListener) }
        for link in s.links {
            guard let callerID = link.callerPlugin, let caller = table[callerID]?.instance, let callee = table[link.callee]?.instance else {
                // Not a link between two workers taken over (a client's comes below): its witness goes.
                if link.callerPlugin != nil || !s.connections.indices.contains(link.callerConnection ?? -1), let witness = link.witness {
                    close(witness)
                }
                continue
            }
            let restored = PeerLink(number: link.number, caller: .worker(caller), callee: callee)
            restoreMark(restored, link)
            caller.linksOut[callee.identifier] = restored
            callee.linksIn[ObjectIdentifier(restored)] = restored
            table.watch(callee)
        }
        for (index, saved) in s.connections.enumerated() {
            adoptConnection(saved) { [self] connection in
                // What was offered to it at the handoff socket is its again (or withdrawn).
                shared.handoff?.adoptOwner(connection: index, as: connection.map(ObjectIdentifier.init))
                guard let connection else {
                    // Its client cannot be taken over: nor can its links, whose witnesses go.
                    for link in s.links where link.callerConnection == index { if let witness = link.witness { close(witness) } }
                    return
                }
                connection.nextHostCallID = saved.nextHostCallID
                for follow in saved.following { events.follow(connection, id: follow.id, plugin: follow.plugin) }
                for name in saved.provides { hostMethods.provide(name, by: connection) }
                for link in s.links where link.callerConnection == index {
                    guard let callee = table[link.callee]?.instance else {
                        if let witness = link.witness { close(witness) }
                        continue
                    }
                    let restored = PeerLink(number: link.number, caller: .client(connection), callee: callee)
                    restoreMark(restored, link)
                    connection.linksOut[callee.identifier] = restored
                    // Its reports for the link are taken even after the link ends here.
                    connection.linkedCallees.insert(callee.identifier)
                    callee.linksIn[ObjectIdentifier(restored)] = restored
                    table.watch(callee)
                }
                if let requester = s.requester, requester.connection == index {
                    connection.outstanding += 1
                    answerUpgrade(handover, to: .client(connection, id: requester.id))
                }
            }
        }
        if s.systemdReady { systemd.ready() }
        lifecycle.startAll { _ in }
        // Every plugin is as the snapshot left it: new clients, which waited in the listener's
        // backlog (ControlServer.adopt holds it), are accepted from here on.
        control.server?.setOption(ChannelOptions.autoRead, value: true).whenFailure { _ in }
        // Taken over: a crash from here on is this binary's own.
        handover.tookOver()
        // The previous binary ended its kept standbys before the handover (`standbyWorkers: "always"`).
        lifecycle.keepStandbys()
        let pauseMs = Double(ProcessControl.monotonicNanoseconds() - s.pausedAtNs) / 1e6
        if let failure = handover.failure {
            logger.error("upgrade failed (\(failure)); \(ProductVersion.current) carries on with every plugin as it was")
            metrics.upgraded(outcome: ErrorCode.unavailable.rawValue)
        } else {
            let execMs = Double(handover.readAtNs - s.pausedAtNs) / 1e6
            func ms(_ value: Double) -> Double { (value * 100).rounded() / 100 }
            logger.notice("upgraded from \(s.fromVersion) to \(ProductVersion.current): \(s.plugins.compactMap(\.worker).count) workers taken over in \(ms(pauseMs)) ms (exec and start \(ms(execMs)) ms, takeover \(ms(pauseMs - execMs)) ms)")
            metrics.upgraded(outcome: "ok")
        }
        // What the previous binary was sent while it handed over, now that the plugins are here.
        for signal in s.signals ?? [] { handleSignal(signal) }
    }

    /// The requester's answer: the new version and the pause, or (the previous binary brought
    /// back) why the upgrade failed.
    private func answerUpgrade(_ handover: UpgradeHandover, to origin: ReplyOrigin) {
        let s = handover.snapshot
        if let failure = handover.failure {
            outbox.answer(origin, error: ErrorBody(.unavailable, "no upgrade: \(failure); \(ProductVersion.current) carries on unchanged"))
            return
        }
        let pauseMs = Double(ProcessControl.monotonicNanoseconds() - s.pausedAtNs) / 1e6
        let answer = UpgradeOutcome(from: s.fromVersion, to: ProductVersion.current, pid: getpid(), workers: s.plugins.compactMap(\.worker).count,
                                   pauseMs: (pauseMs * 1000).rounded() / 1000)
        outbox.respond(origin) { try ProtocolJSON.encode(["upgraded": answer]) }
    }

    /// A link's word in its callee's page and the witness of its callee's end, as the previous
    /// binary held them (read at the callee's death, LinkMarks.swift).
    private func restoreMark(_ restored: PeerLink, _ saved: UpgradeSnapshot.Link) {
        guard let slot = saved.markSlot, let witness = saved.witness else { return }
        restored.markSlot = slot
        restored.witness = witness
        restored.callee.crash.linkSlots.claim(slot)
    }

    /// A worker the snapshot names, taken over as it runs.
    private func adoptWorker(_ record: PluginRecord, _ w: UpgradeSnapshot.Worker) {
        let process = ChildProcess.adopt(pid: w.pid, pidfd: OwnedDescriptor(w.pidfd))
        var manifest = record.manifest
        if manifest.version.description != w.version || manifest.bundle != w.bundle {
            // The folders changed under the running worker (an offline swap): it runs what it loaded.
            if let loaded = try? Manifest.load(bundle: w.bundle) { manifest = loaded }
        }
        let instance = WorkerInstance(process: process, manifest: manifest, temporaryFolder: w.temporaryFolder,
                                      now: .now() - .nanoseconds(w.ageNs))
        for phase in [WorkerPhase.loaded, .startingUp, .running] { instance.move(to: phase, logger: logger) }
        instance.hello = HelloFacts(sandbox: w.sandbox, sandboxMissing: w.sandboxMissing, idempotent: w.idempotent ?? [])
        instance.timings = w.timings
        instance.logWindow = RateWindow.logs(floodLimit: config.floodLogsPerSecond)
        instance.forked = w.forked
        instance.startProblem = w.startProblem
        if let library = w.library { instance.library = (library, FileStamp(path: library)) }
        instance.cgroup = w.cgroupGroup
        instance.descriptorChannel = w.descriptorChannel
        instance.payloadChannel = w.payloadChannel
        instance.pending.resume(nextID: w.nextID)
        // Its marks count again once it has sent its taken page (asked when its socket is wired in).
        if let taken = w.taken { instance.crash.resume(highestSent: max(w.nextID, 1) - 1, taken: taken, linkMarks: w.linkMarks == true) }
        instance.linkedCallees = Set(w.linkedCallees)
        record.instance = instance
        record.library = w.library
        record.variant = w.variant
        // Running before its socket is wired in (which may complete at once, on the loop): calls
        // that came meanwhile go to it then.
        _ = record.move(to: .starting, logger: logger)
        _ = record.move(to: .running, logger: logger)
        table.workerSpawned(instance)
        let back = handOff((lifecycle: lifecycle, instance: instance))
        do {
            try shared.watcher?.watch(process) { exit in back.execute { $0.lifecycle.childExited($0.instance, exit) } }
        } catch {
            logger.error("upgrade: cannot watch the worker of \(record.identifier) (pid \(w.pid)): \(error); it is ended")
            process.signal(SIGKILL)
        }
        WorkerChannel.connect(OwnedDescriptor(w.socket), for: instance, engine: self, leftover: w.leftover)
        let out = w.stdout.map { OutputCapture.attach(OwnedDescriptor($0), stream: "stdout", plugin: record.identifier, shared: shared) }
        let err = w.stderr.map { OutputCapture.attach(OwnedDescriptor($0), stream: "stderr", plugin: record.identifier, shared: shared) }
        if let out, let err { instance.outputFDs = (out, err) }
    }

    /// A running worker of a plugin whose folder is gone: ended (its record went with the folder).
    private func endOrphan(_ w: UpgradeSnapshot.Worker, _ identifier: String) {
        logger.warning("upgrade: \(identifier) is no longer in the plugin folders; its worker (pid \(w.pid)) is ended")
        let process = ChildProcess.adopt(pid: w.pid, pidfd: OwnedDescriptor(w.pidfd))
        process.signal(SIGKILL)
        // Its group goes once it is reaped (a group with a process in it cannot be removed).
        let group = w.cgroupGroup
        try? shared.watcher?.watch(process) { _ in group?.remove() }
        let fds: [Int32?] = [w.socket, w.descriptorChannel, w.payloadChannel, w.stdout, w.stderr]
        for fd in fds.compactMap({ $0 }) { close(fd) }
    }

    /// A control client's connection, made a channel again; `restore` runs once it is one, or with
    /// nil when it cannot be (its client's links are then not restored either).
    private func adoptConnection(_ saved: UpgradeSnapshot.Connection, restore: @escaping (ControlConnection?) -> Void) {
        let maxBody = config.maxFrameBytes
        let me = handOff(self)
        let back = handOff(restore)
        ClientBootstrap(group: loop)
            .channelOption(ChannelOptions.writeBufferWaterMark, value: Outbox.waterMark)
            .channelOption(ChannelOptions.recvAllocator, value: Outbox.receiveBuffers)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try ControlServer.addHandlers(channel, connection: ControlConnection(channel: channel), maxBody: maxBody, engine: me.value)
                }
            }
            .withConnectedSocket(saved.fd)
            .assumeIsolated().whenComplete { result in
                let engine = me.value
                switch result {
                case .success(let channel):
                    guard let connection = engine.control.connections.values.first(where: { $0.channel === channel }) else { return back.value(nil) }
                    back.value(connection)
                    if !saved.leftover.isEmpty { Upgrade.feed(saved.leftover, to: channel) }
                case .failure(let error):
                    engine.logger.warning("upgrade: cannot take over a control client's connection (descriptor \(saved.fd)): \(error)")
                    back.value(nil)
                }
            }
    }
}
