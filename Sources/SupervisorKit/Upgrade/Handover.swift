#if canImport(Glibc)
import Glibc
#endif
import CPluginABI
import LinuxSupport
import Logging
import NIOCore
import PluginProtocol
import Protocol
import SupervisorCore

/// Step 4 of an upgrade in place (Upgrade.swift): the handover, once the supervisor is quiet.
/// Reading stops on every socket, each frame codec gives up what it held, the state goes into a
/// snapshot in a sealed memfd, and the main thread execs the new binary; a failed exec is undone.
extension Engine {
    // MARK: 4. Handover

    /// Waits for every queued write to reach its socket, takes the frame codecs out (keeping what
    /// they held), reads the sockets' cookies, then execs.
    func handOver(_ q: Quieting) {
        let workers = Array(table.liveWorkers)
        let connections = Array(control.connections.values.filter { !$0.closed })
        var listeners: [Channel] = []
        if let server = control.server { listeners.append(server) }
        if let metrics = metricsListener { listeners.append(metrics) }
        prepare(workers: workers, connections: connections, listeners: listeners) { [self] cookies in
            guard let cookies else { return handOverFailed(q, held: [], Self.unflushed) }
            handOverLate(q, workers: workers, connections: connections, cookies: cookies)
        }
    }

    /// A client whose connection became active while the others were being prepared (its accept
    /// was under way as the listener stopped) is prepared too, and handed over with them: left
    /// out, it would be closed by the exec with its request unanswered.
    private func handOverLate(_ q: Quieting, workers: [WorkerInstance], connections: [ControlConnection], cookies: [ObjectIdentifier: UInt64]) {
        let prepared = Set(connections.map(ObjectIdentifier.init))
        let late = control.connections.values.filter { !$0.closed && !prepared.contains(ObjectIdentifier($0)) }
        guard !late.isEmpty else { return exec(q, workers: workers, connections: connections, cookies: cookies) }
        for connection in late { connection.channel.setOption(ChannelOptions.autoRead, value: false).whenFailure { _ in } }
        prepare(workers: [], connections: Array(late), listeners: []) { [self] more in
            guard let more else { return handOverFailed(q, held: [], Self.unflushed) }
            handOverLate(q, workers: workers, connections: connections + late, cookies: cookies.merging(more) { a, _ in a })
        }
    }

    /// How long what is queued for the workers and clients may take to go out: a client that
    /// reads none of its answers would otherwise hold the handover, and every other client with
    /// it, for good.
    static let flushLimit = TimeAmount.seconds(2)
    static let unflushed = "what was queued for a control client did not go out within 2 s (a client that does not read its answers); try again"

    /// Flushes what is queued for `workers` and `connections` (within `flushLimit`, else `done`
    /// gets nil), takes their frame codecs out (collecting what they held), and reads every
    /// socket's cookie (the listeners' too).
    private func prepare(workers: [WorkerInstance], connections: [ControlConnection], listeners: [Channel],
                         then done: @escaping ([ObjectIdentifier: UInt64]?) -> Void) {
        let streams: [Channel] = workers.compactMap(\.channel) + connections.map(\.channel)
        let channels = streams + listeners
        let empty = ByteBuffer()
        let flushed = EventLoopFuture.whenAllComplete(streams.map { $0.writeAndFlush(empty) }, on: loop)
        final class Settled { var done = false }
        let settled = Settled()
        let inTime = loop.makePromise(of: Void.self)
        let limit = loop.assumeIsolated().scheduleTask(in: Self.flushLimit) {
            guard !settled.done else { return }
            settled.done = true
            inTime.fail(ChannelError.writeHostUnreachable)
        }
        flushed.assumeIsolated().whenComplete { _ in
            guard !settled.done else { return }
            settled.done = true
            limit.cancel()
            inTime.succeed()
        }
        inTime.futureResult.assumeIsolated().whenFailure { _ in done(nil) }
        inTime.futureResult.assumeIsolated().flatMap { [self] _ -> EventLoopFuture<[Result<Void, any Error>]> in
            for worker in workers { worker.frameLeftovers?.collecting = true }
            for connection in connections { connection.leftovers.collecting = true }
            let removed = streams.map { $0.pipeline.removeHandler(name: FrameCodec.handlerName) }
            return EventLoopFuture.whenAllComplete(removed, on: loop)
        }.flatMap { [self] _ -> EventLoopFuture<[UInt64?]> in
            let cookies = channels.map { channel -> EventLoopFuture<UInt64?> in
                guard let provider = channel as? SocketOptionProvider else { return loop.makeSucceededFuture(nil) }
                let cookie: EventLoopFuture<UInt64> = provider.unsafeGetSocketOption(level: SocketOptionLevel(SOL_SOCKET), name: Upgrade.cookieOption)
                return cookie.map { Optional($0) }.recover { _ in nil }
            }
            return EventLoopFuture.whenAllSucceed(cookies, on: loop)
        }.whenSuccess { cookies in
            var byChannel: [ObjectIdentifier: UInt64] = [:]
            for (channel, cookie) in zip(channels, cookies) { if let cookie { byChannel[ObjectIdentifier(channel)] = cookie } }
            done(byChannel)
        }
    }

    private func exec(_ q: Quieting, workers: [WorkerInstance], connections: [ControlConnection], cookies: [ObjectIdentifier: UInt64]) {
        // Nothing may have come in while the codecs came out (only a child's exit can): else the
        // snapshot would miss it.
        if let busy = inFlightThroughSupervisor(requester: q.origin) {
            return handOverFailed(q, held: [], "something happened during the handover (\(busy)); try again")
        }
        let sockets = InPlaceExec.socketsByCookie()
        func fd(of channel: Channel?) -> Int32? {
            guard let channel, let cookie = cookies[ObjectIdentifier(channel)] else { return nil }
            return sockets[cookie]
        }
        // The notifier stops between two answers; its descriptors go with the rest.
        let held = shared.notifier?.handOver() ?? []
        shared.notifier = nil
        var snapshot: UpgradeSnapshot
        switch makeSnapshot(q, workers: workers, connections: connections, held: held, controlListener: fd(of: control.server),
                            metricsListener: fd(of: metricsListener), connectionFD: { fd(of: $0.channel) }) {
        case .failure(let why): return handOverFailed(q, held: held, why.m)
        case .success(let made): snapshot = made
        }
        snapshot.pausedAtNs = ProcessControl.monotonicNanoseconds()
        // Tests: a signal that comes after the snapshot was taken, just before the exec.
        if let signal = ProcessEnvironment["SP_TEST_SIGNAL_AT_HANDOVER"].flatMap(Int32.init) { kill(getpid(), signal) }
        let memfd: OwnedDescriptor
        do {
            // Sealed as bytes between processes are (sp_bytes.h): the next binary reads it as it is.
            let encoded = try ProtocolJSON.encode(snapshot)
            let fd = encoded.withUnsafeBytes { sp_bytes_create($0.baseAddress, $0.count) }
            guard fd >= 0 else { throw SystemError(call: "memfd_create", errno: -fd, context: "the upgrade's snapshot") }
            memfd = OwnedDescriptor(fd)
        } catch {
            return handOverFailed(q, held: held, "cannot write the snapshot: \(error)")
        }
        let previous: InPlaceExec.Binary
        do { previous = try InPlaceExec.openSelf() } catch {
            return handOverFailed(q, held: held, "\(error)")
        }
        let kept = snapshot.descriptors + [memfd.raw, previous.fd]
        do {
            try InPlaceExec.keepAcrossExec(kept)
            try InPlaceExec.closeOthersAtExec(keeping: kept)
        } catch {
            try? InPlaceExec.keepAcrossExec(kept, false)
            previous.close()
            return handOverFailed(q, held: held, "\(error)")
        }
        var arguments = InPlaceExec.arguments()
        if arguments.isEmpty { arguments = ["supervisor", "start"] }
        arguments[0] = q.binary.path
        let environment = Self.environmentForUpgrade(snapshot: memfd.raw, previous: previous.fd)
        logger.notice("upgrade: handing over to \(q.binary.path) (\(q.version))")
        // The exec ends the log's writing thread: what it has is written first (a reader that
        // does not read costs the pause half a second at most, and those lines).
        LogWriter.flushAll(milliseconds: 500)
        // From the main thread, which made every worker (SpawnerThread): it returns only on failure.
        var failure: SystemError?
        shared.onSpawnerThread {
            failure = InPlaceExec.exec(q.binary, arguments: arguments, environment: environment)
        }
        try? InPlaceExec.keepAcrossExec(kept, false)
        previous.close()
        handOverFailed(q, held: held, "the exec failed: \(failure.map { "\($0)" } ?? "?")")
    }

    /// Our environment, with the snapshot's variable in it and no failure from an earlier upgrade.
    static func environmentForUpgrade(snapshot: Int32, previous: Int32) -> [String] {
        InPlaceExec.environment(without: [UpgradeHandover.environmentVariable, UpgradeHandover.failureVariable])
            + ["\(UpgradeHandover.environmentVariable)=\(snapshot):\(previous)"]
    }

    /// The handover failed before the exec: every codec goes back with what it held, reading
    /// resumes, the notifier starts again with its descriptors, and the supervisor serves on.
    private func handOverFailed(_ q: Quieting, held: [SeccompNotifier.Held], _ why: String) {
        q.binary.close()
        upgrade = .idle
        // The signals that came meanwhile are this binary's to act on, after the rest is undone:
        // those passed on before the relay paused, then those it left pending.
        let signals = signalsDuringHandover
        signalsDuringHandover = []
        defer {
            for signal in signals { handleSignal(signal) }
            if q.signalsPaused { LifecycleSignals.resumeCaughtRelay() }
        }
        for worker in table.liveWorkers {
            if let channel = worker.channel, let leftovers = worker.frameLeftovers {
                restoreCodec(channel, leftovers, readsPastTheEnd: true)
            }
        }
        for connection in control.connections.values where !connection.closed {
            restoreCodec(connection.channel, connection.leftovers, readsPastTheEnd: false)
        }
        // Stopped for the exec (it is nil then): started again with what it held.
        if shared.notifier == nil, !held.isEmpty || config.sandboxEnabled {
            do {
                let notifier = try SeccompNotifier()
                shared.notifier = notifier
                for h in held { watchFilter(pid: h.pid, fd: h.fd, isListener: h.isListener) }
            } catch {
                logger.error("upgrade: cannot start the seccomp notifier again (\(error)); the workers' filtered calls wait for their end")
            }
        }
        resumeReading()
        startTimers()
        lifecycle.keepStandbys()
        upgradeFailed(q.origin, ErrorBody(.unavailable, "no upgrade: \(why); the supervisor carries on unchanged"))
    }

    private func restoreCodec(_ channel: Channel, _ leftovers: FrameCodec.Leftovers, readsPastTheEnd: Bool) {
        leftovers.collecting = false
        // A handover that failed before the codecs came out (what was queued did not go out in
        // time) left this one in place: a second would read bodies as frames.
        if (try? channel.pipeline.syncOperations.context(name: FrameCodec.handlerName)) != nil { return }
        let bytes = leftovers.bytes
        leftovers.bytes = []
        do {
            try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(FrameCodec(maxBody: config.maxFrameBytes, leftovers: leftovers,
                                                                                                         readsPastTheEnd: readsPastTheEnd)),
                                                           name: FrameCodec.handlerName, position: .first)
            if !bytes.isEmpty { Upgrade.feed(bytes, to: channel) }
        } catch {
            channel.close(promise: nil)
        }
    }

    /// Answers `pid`'s seccomp filter on `fd` (the listener, or the channel it is to come on).
    func watchFilter(pid: pid_t, fd: Int32, isListener: Bool) {
        guard let notifier = shared.notifier, let instance = table.worker(pid: pid) else {
            close(fd)
            return
        }
        let back = handOff((lifecycle: lifecycle, instance: instance))
        let answer: @Sendable (SeccompCall) -> SeccompAnswer = { call in SandboxAnswers.answer(call, for: back) }
        do {
            if isListener {
                try notifier.adopt(listener: OwnedDescriptor(fd), process: instance.process, answer: answer)
            } else {
                try notifier.adopt(channel: OwnedDescriptor(fd), process: instance.process, answer: answer)
            }
        } catch {
            lifecycle.kill(instance, .spawnError, "cannot answer for its seccomp filter: \(error)")
        }
    }

    // MARK: The snapshot

    private func makeSnapshot(_ q: Quieting, workers: [WorkerInstance], connections: [ControlConnection], held: [SeccompNotifier.Held],
                              controlListener: Int32?, metricsListener: Int32?,
                              connectionFD: (ControlConnection) -> Int32?) -> Result<UpgradeSnapshot, UpgradeProbe.Refusal> {
        guard let lock = shared.homeLockFD else { return .failure(UpgradeProbe.Refusal(m: "the home's lock is not held")) }
        if config.servesControlSocket, controlListener == nil { return .failure(UpgradeProbe.Refusal(m: "the control socket's descriptor could not be found")) }
        if config.metricsListen != nil, metricsListener == nil { return .failure(UpgradeProbe.Refusal(m: "the metrics listener's descriptor could not be found")) }
        var connectionIndex: [ObjectIdentifier: Int] = [:]
        var savedConnections: [UpgradeSnapshot.Connection] = []
        for connection in connections {
            guard let fd = connectionFD(connection) else { return .failure(UpgradeProbe.Refusal(m: "a control client's descriptor could not be found")) }
            connectionIndex[ObjectIdentifier(connection)] = savedConnections.count
            let follows = events.following(connection).map { UpgradeSnapshot.Connection.Follow(id: $0.id, plugin: $0.plugin) }
            savedConnections.append(UpgradeSnapshot.Connection(fd: fd, leftover: connection.deferredBytes + connection.leftovers.bytes, following: follows,
                                                               provides: connection.provides.sorted(), nextHostCallID: connection.nextHostCallID))
        }
        var requester: UpgradeSnapshot.Requester?
        if case .client(let c, let id) = q.origin, let index = connectionIndex[ObjectIdentifier(c)] {
            requester = UpgradeSnapshot.Requester(connection: index, id: id)
        }
        var plugins: [UpgradeSnapshot.Plugin] = []
        let now = NIODeadline.now()
        for record in table.inOrder {
            var worker: UpgradeSnapshot.Worker?
            if let w = record.instance, w.phase == .running {
                guard w.socketFD >= 0 else { return .failure(UpgradeProbe.Refusal(m: "\(record.identifier)'s socket is not known")) }
                worker = UpgradeSnapshot.Worker(
                    pid: w.pid, pidfd: w.process.descriptor, socket: w.socketFD, leftover: w.frameLeftovers?.bytes ?? [],
                    descriptorChannel: w.descriptorChannel, payloadChannel: w.payloadChannel,
                    stdout: w.outputFDs?.stdout, stderr: w.outputFDs?.stderr,
                    cgroup: w.cgroup?.folders, cgroupVersion: w.cgroup?.version.rawValue,
                    temporaryFolder: w.temporaryFolder, bundle: w.manifest.bundle, version: w.manifest.version.description,
                    library: w.library?.path, variant: record.variant, forked: w.forked, startProblem: w.startProblem,
                    sandbox: w.hello?.sandbox ?? [], sandboxMissing: w.hello?.sandboxMissing ?? [], timings: w.timings,
                    ageNs: (now - w.spawnedAt).nanoseconds, nextID: w.nextID, linkedCallees: w.linkedCallees.sorted(),
                    idempotent: w.hello?.idempotent, taken: w.crash.handedOver?.taken, linkMarks: w.crash.handedOver?.linkMarks)
            }
            plugins.append(UpgradeSnapshot.Plugin(identifier: record.identifier, phase: .init(record.phase, hasWorker: worker != nil), restarts: record.restarts,
                                                  restartAgesNs: record.restartHistory.map { now.instant.nanoseconds(since: $0) }, hasRun: record.hasRun,
                                                  problem: record.problem, lastError: record.lastError, lastExit: record.lastExit,
                                                  sandboxDenials: record.sandboxDenials, worker: worker, restartInNs: restartLeft(record, now: now),
                                                  idleNs: max(0, (now - record.lastTraffic).nanoseconds)))
        }
        var links: [UpgradeSnapshot.Link] = []
        for w in workers {
            // A link's mark goes on only where the callee's page does (the next binary asks for it).
            let marked = w.crash.handedOver?.linkMarks == true
            for link in w.linksIn.values {
                var saved = UpgradeSnapshot.Link(number: link.number, callee: w.identifier)
                if marked, let slot = link.markSlot, link.witness >= 0 { (saved.markSlot, saved.witness) = (slot, link.witness) }
                switch link.caller {
                case .worker(let caller): saved.callerPlugin = caller.identifier
                case .client(let c):
                    guard let index = connectionIndex[ObjectIdentifier(c)] else { continue }
                    saved.callerConnection = index
                case .host: continue
                }
                links.append(saved)
            }
        }
        var handoffState: UpgradeSnapshot.Handoff?
        if let handoff = shared.handoff {
            let h = handoff.handOver { connectionIndex[$0] }
            handoffState = UpgradeSnapshot.Handoff(listener: h.listener, offers: h.offers, deposits: h.deposits)
        }
        var oldForkServer: UpgradeSnapshot.Child?
        if let server = lifecycle.forkServer.current {
            oldForkServer = UpgradeSnapshot.Child(pid: server.process.pid, pidfd: server.process.descriptor)
        }
        return .success(UpgradeSnapshot(
            fromVersion: ProductVersion.current, pausedAtNs: 0, upgrades: upgrades, homeLock: lock, controlListener: controlListener,
            metricsListener: metricsListener, handoff: handoffState, oldForkServer: oldForkServer,
            executables: ["worker": config.workerExecutable, "forkServer": config.forkServerExecutable,
                          "workerLibrary": config.workerLibrary, "installer": config.installerExecutable],
            cgroupTree: shared.cgroups.map { .init(version: $0.version.rawValue, bases: $0.bases) }, cgroupsMissing: shared.cgroupsMissing,
            systemdReady: shared.phase == .launched,
            launched: shared.phase == .launched, requester: requester, plugins: plugins, connections: savedConnections, links: links,
            nextLinkNumber: router.nextLinkNumber, notifier: held.map { UpgradeSnapshot.Held(pid: $0.pid, fd: $0.fd, isListener: $0.isListener) },
            signals: signalsDuringHandover, configText: config.configFileText))
    }

    /// What is left of `record`'s backoff delay (ns), if a restart waits for one.
    private func restartLeft(_ record: PluginRecord, now: NIODeadline) -> Int64? {
        guard case .restart(_, let due) = record.next else { return nil }
        return max(0, (due - now).nanoseconds)
    }
}
