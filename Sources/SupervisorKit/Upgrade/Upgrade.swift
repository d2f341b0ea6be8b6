#if canImport(Glibc)
import Glibc
#endif
import CPluginABI
import LinuxSupport
import Logging
import NIOCore
import PluginProtocol
import Protocol

/// Upgrading the supervisor in place (SPEC §14; docs/operations.md, "Upgrading the supervisor"):
/// `supervisor upgrade [--binary PATH]` or SIGUSR2. The steps, each of which can still say no and
/// leave everything as it was:
///
/// 1. **Refusals** at once: an embedded supervisor, another upgrade, a shutdown, an install or an
///    update under way, plugins still starting.
/// 2. **The binary is checked** off the loop: a regular executable ELF file of this architecture,
///    which runs (`<binary> upgrade-probe`, within 5 s) and reads this snapshot format.
/// 3. **Quiet**: the supervisor stops taking new requests from control clients (their bytes wait
///    in their sockets, which are handed over unread) and waits, up to `quietLimit`, until nothing
///    is in flight through it: no request to or from a worker, no client call, no link being
///    given back, no plugin between two phases. Calls over direct links go on all along: they do
///    not pass through the supervisor.
/// 4. **Handover**: reading stops on every socket, what each frame codec held of a frame not yet
///    whole is kept, the seccomp notifier stops between two answers, and the state goes into a
///    snapshot (UpgradeSnapshot) in a sealed memfd. Every descriptor it names loses close-on-exec,
///    and the main thread (which made every child) execs the binary. If the exec fails, all of it
///    is undone and the supervisor serves on.
/// 5. The new binary **resumes** from the snapshot (Resume.swift) and answers the `upgrade`; if it
///    crashes, refuses the snapshot or stalls for 5 s before it has taken over, it execs the
///    previous binary with the same snapshot (`InPlaceExec.armRescue`), which carries on and
///    answers with why.
enum UpgradePhase {
    case idle
    /// The binary is being checked off the loop.
    case checking(origin: ReplyOrigin?)
    /// Waiting for nothing to be in flight.
    case quieting(Quieting)

    var isIdle: Bool { if case .idle = self { true } else { false } }
}

/// An upgrade between its check and its exec.
struct Quieting {
    var origin: ReplyOrigin?
    var binary: InPlaceExec.Binary
    var version: String
    var since: NIODeadline
    var tick: RepeatedTask?
}

/// Things an upgrade does that are not the engine's.
enum Upgrade {
    /// How long the supervisor waits for quiet before it gives up (the upgrade fails, nothing lost).
    static let quietLimit = TimeAmount.seconds(2)
    /// How long the new binary has to take over (and the check's probe has to answer).
    static let takeoverSeconds: UInt32 = 5

    /// Feeds `bytes` (a frame's beginning the previous binary had read) to `channel`'s frame codec,
    /// ahead of whatever its socket holds.
    static func feed(_ bytes: [UInt8], to channel: Channel) {
        var buffer = channel.allocator.buffer(capacity: bytes.count)
        buffer.writeBytes(bytes)
        channel.pipeline.fireChannelRead(buffer)
    }

    /// SO_COOKIE: a socket's number for the whole system, which NIO's channels can be asked for
    /// (their descriptors they do not say).
    static let cookieOption = SocketOptionName(57)
}

extension Engine {
    // MARK: 1. The request

    /// `upgrade` from a client (`origin`) or SIGUSR2 (no origin: the outcome is logged).
    func upgradeCommand(binary: String?, origin: ReplyOrigin?) {
        loop.preconditionInEventLoop()
        if let refusal = upgradeRefusal() {
            return upgradeFailed(origin, ErrorBody(.unavailable, "no upgrade: \(refusal)"))
        }
        let path = binary ?? FileSystem.executablePath()
        upgrade = .checking(origin: origin)
        logger.notice("upgrade: checking \(path)")
        let back = handOff(self)
        Threads.start(name: "upgrade-check") {
            let checked = Self.checkBinary(path)
            back.execute { $0.binaryChecked(checked) }
        }
    }

    /// Why an upgrade cannot begin now, if it cannot.
    func upgradeRefusal() -> String? {
        guard shared.spawner != nil else {
            return "only `supervisor start` can upgrade in place (an embedded supervisor runs in its program's process)"
        }
        guard upgrade.isIdle else { return "another upgrade is under way" }
        if isShuttingDown { return "the supervisor is shutting down" }
        if shared.phase == .starting { return "plugins are still starting (the ready line has not been printed)" }
        if installs.inFlight > 0 { return "an install or an update is under way" }
        for record in table.inOrder {
            if record.successor != nil { return "\(record.identifier) is being updated" }
            if record.updateGrace != nil { return "\(record.identifier)'s update is within its grace period (it may still roll back)" }
        }
        return nil
    }

    /// The binary: open, checked, and asked which snapshot formats it reads.
    static func checkBinary(_ path: String) -> Result<(InPlaceExec.Binary, String), ErrorBody> {
        let binary: InPlaceExec.Binary
        do { binary = try InPlaceExec.open(path) } catch {
            return .failure(ErrorBody(.badRequest, "no upgrade: \(error)"))
        }
        switch UpgradeProbe.run(binary, timeoutSeconds: Int(Upgrade.takeoverSeconds)) {
        case .failure(let why):
            binary.close()
            return .failure(ErrorBody(.unavailable, "no upgrade: \(why)"))
        case .success(let answer):
            guard answer.snapshotFormats.contains(UpgradeSnapshot.format) else {
                binary.close()
                return .failure(ErrorBody(.unavailable, "no upgrade: \(path) (\(answer.version)) refuses this supervisor's snapshot format \(UpgradeSnapshot.format) (it reads \(answer.snapshotFormats.map(String.init).joined(separator: ", ")))"))
            }
            return .success((binary, answer.version))
        }
    }

    func binaryChecked(_ checked: Result<(InPlaceExec.Binary, String), ErrorBody>) {
        guard case .checking(let origin) = upgrade else {
            if case .success(let (binary, _)) = checked { binary.close() }
            return
        }
        switch checked {
        case .failure(let error):
            upgrade = .idle
            upgradeFailed(origin, error)
        case .success(let (binary, version)):
            // The state may have changed while the binary was checked.
            upgrade = .idle
            if let refusal = upgradeRefusal() {
                binary.close()
                return upgradeFailed(origin, ErrorBody(.unavailable, "no upgrade: \(refusal)"))
            }
            startQuieting(Quieting(origin: origin, binary: binary, version: version, since: .now()))
        }
    }

    func upgradeFailed(_ origin: ReplyOrigin?, _ error: ErrorBody) {
        logger.error("\(error.message)")
        metrics.upgraded(outcome: error.code)
        if let origin { outbox.answer(origin, error: error) }
    }

    // MARK: 3. Quiet

    /// An upgrade is waiting for quiet or handing over: no control client is read from.
    var upgradeHoldsReads: Bool { if case .quieting = upgrade { true } else { false } }

    private func startQuieting(_ quieting: Quieting) {
        var quieting = quieting
        control.server?.setOption(ChannelOptions.autoRead, value: false).whenFailure { _ in }
        for connection in control.connections.values {
            connection.channel.setOption(ChannelOptions.autoRead, value: false).whenFailure { _ in }
        }
        let me = handOff(self)
        quieting.tick = loop.scheduleRepeatedTask(initialDelay: .milliseconds(1), delay: .milliseconds(1)) { _ in me.value.quietTick() }
        upgrade = .quieting(quieting)
        logger.info("upgrade: \(quieting.binary.path) (\(quieting.version)) checked; waiting for the calls in flight")
        // Often quiet already.
        quietTick()
    }

    private func quietTick() {
        guard case .quieting(var q) = upgrade, q.tick != nil else { return }
        // Kept standbys (`standbyWorkers: "always"`) are not handed over: they end, and the next
        // binary keeps its own. Each tick, for one kept by a restart meanwhile.
        lifecycle.discardKeptStandbys(because: "the supervisor is upgrading in place")
        if let busy = inFlightThroughSupervisor(requester: q.origin) {
            if NIODeadline.now() - q.since > Upgrade.quietLimit {
                q.tick?.cancel()
                upgrade = .idle
                resumeReading()
                lifecycle.keepStandbys()
                q.binary.close()
                return upgradeFailed(q.origin, ErrorBody(.unavailable, "no upgrade: the supervisor was not quiet within \(Upgrade.quietLimit.nanoseconds / 1_000_000) ms (\(busy)); nothing changed"))
            }
            upgrade = .quieting(q)
            return
        }
        // Quiet: reading stops on the workers' sockets too (what they send now waits in the sockets
        // for the next binary), the timers stop (no ping goes out), and the handover begins.
        stopTimers()
        for worker in table.liveWorkers {
            worker.channel?.setOption(ChannelOptions.autoRead, value: false).whenFailure { _ in }
        }
        q.tick?.cancel()
        q.tick = nil
        upgrade = .quieting(q)
        handOver(q)
    }

    /// What still passes through the supervisor, if anything (nil: quiet).
    func inFlightThroughSupervisor(requester: ReplyOrigin?) -> String? {
        if installs.inFlight > 0 { return "an install is under way" }
        if !hostMethods.isIdle { return "a plugin's call of a host method is in flight" }
        for record in table.inOrder {
            let id = record.identifier
            if !record.waiting.isEmpty { return "calls wait for \(id) to start" }
            if !record.retiring.isEmpty { return "a worker of \(id) is being stopped" }
            switch record.next {
            case .none, .restart: break
            case .successor: return "\(id) is being updated"
            case .standby: return "\(id) is restarting"
            }
            switch record.phase {
            case .running, .failed, .stopped: break
            case .restarting where record.instance == nil: break
            default: return "\(id) is \(record.phase.shown)"
            }
            guard let worker = record.instance else { continue }
            if worker.phase != .running { return "\(id)'s worker is \(worker.phase)" }
            if !worker.pending.isEmpty { return "\(worker.pending.count) request(s) to \(id) in flight" }
            if !worker.outgoing.isEmpty { return "\(id)'s calls to other plugins in flight" }
            if worker.linksIn.values.contains(where: \.unlinking) { return "a link to \(id) is being given back" }
        }
        var requesting: ControlConnection?
        if case .client(let c, _) = requester { requesting = c }
        for connection in control.connections.values where !connection.closed {
            let own = connection === requesting ? 1 : 0
            if connection.outstanding > own || !connection.inFlight.isEmpty || !connection.hostCalls.isEmpty || !connection.unlinks.isEmpty {
                return "a client's request is in flight"
            }
        }
        return nil
    }

    /// Reading goes on (an upgrade that did not happen).
    func resumeReading() {
        control.server?.setOption(ChannelOptions.autoRead, value: true).whenFailure { _ in }
        for connection in control.connections.values where connection.channel.isWritable {
            connection.channel.setOption(ChannelOptions.autoRead, value: true).whenFailure { _ in }
        }
        for worker in table.liveWorkers {
            worker.channel?.setOption(ChannelOptions.autoRead, value: true).whenFailure { _ in }
        }
    }

    // MARK: 4. Handover

    /// Waits for every queued write to reach its socket, takes the frame codecs out (keeping what
    /// they held), reads the sockets' cookies, then execs.
    private func handOver(_ q: Quieting) {
        let workers = Array(table.liveWorkers)
        let connections = Array(control.connections.values.filter { !$0.closed })
        var channels: [Channel] = workers.compactMap(\.channel) + connections.map(\.channel)
        let empty = ByteBuffer()
        var flushed: [EventLoopFuture<Void>] = []
        for channel in channels {
            flushed.append(channel.writeAndFlush(empty))
        }
        var listeners: [Channel] = []
        if let server = control.server { listeners.append(server) }
        if let metrics = metricsListener { listeners.append(metrics) }
        channels += listeners
        EventLoopFuture.whenAllComplete(flushed, on: loop).assumeIsolated().flatMap { [self] _ -> EventLoopFuture<[Result<Void, any Error>]> in
            for worker in workers { worker.frameLeftovers?.collecting = true }
            for connection in connections { connection.leftovers.collecting = true }
            let removed = (workers.compactMap(\.channel) + connections.map(\.channel)).map {
                $0.pipeline.removeHandler(name: FrameCodec.handlerName)
            }
            return EventLoopFuture.whenAllComplete(removed, on: loop)
        }.flatMap { [self] _ -> EventLoopFuture<[UInt64?]> in
            let cookies = channels.map { channel -> EventLoopFuture<UInt64?> in
                guard let provider = channel as? SocketOptionProvider else { return loop.makeSucceededFuture(nil) }
                let cookie: EventLoopFuture<UInt64> = provider.unsafeGetSocketOption(level: SocketOptionLevel(SOL_SOCKET), name: Upgrade.cookieOption)
                return cookie.map { Optional($0) }.recover { _ in nil }
            }
            return EventLoopFuture.whenAllSucceed(cookies, on: loop)
        }.whenComplete { [self] result in
            let cookies = (try? result.get()) ?? []
            var byChannel: [ObjectIdentifier: UInt64] = [:]
            for (channel, cookie) in zip(channels, cookies) { if let cookie { byChannel[ObjectIdentifier(channel)] = cookie } }
            exec(q, workers: workers, connections: connections, cookies: byChannel)
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
        do { try InPlaceExec.keepAcrossExec(kept) } catch {
            try? InPlaceExec.keepAcrossExec(kept, false)
            previous.close()
            return handOverFailed(q, held: held, "\(error)")
        }
        var arguments = InPlaceExec.arguments()
        if arguments.isEmpty { arguments = ["supervisor", "start"] }
        arguments[0] = q.binary.path
        let environment = Self.environmentForUpgrade(snapshot: memfd.raw, previous: previous.fd)
        logger.notice("upgrade: handing over to \(q.binary.path) (\(q.version))")
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
        for worker in table.liveWorkers {
            if let channel = worker.channel, let leftovers = worker.frameLeftovers {
                restoreCodec(channel, leftovers)
            }
        }
        for connection in control.connections.values where !connection.closed {
            restoreCodec(connection.channel, connection.leftovers)
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

    private func restoreCodec(_ channel: Channel, _ leftovers: FrameCodec.Leftovers) {
        leftovers.collecting = false
        let bytes = leftovers.bytes
        leftovers.bytes = []
        do {
            try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(FrameCodec(maxBody: config.maxFrameBytes, leftovers: leftovers)),
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
            savedConnections.append(UpgradeSnapshot.Connection(fd: fd, leftover: connection.leftovers.bytes, following: follows,
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
                    ageNs: (now - w.spawnedAt).nanoseconds, nextID: w.nextID, linkedCallees: w.linkedCallees.sorted())
            }
            let phase: String
            switch record.phase {
            case .running where worker != nil: phase = "running"
            case .failed(let byDependency): phase = byDependency ? "failedByDependency" : "failed"
            case .stopped: phase = "stopped"
            default: phase = "restarting"
            }
            plugins.append(UpgradeSnapshot.Plugin(identifier: record.identifier, phase: phase, restarts: record.restarts, hasRun: record.hasRun,
                                                  problem: record.problem, lastError: record.lastError, lastExit: record.lastExit,
                                                  sandboxDenials: record.sandboxDenials, worker: worker))
        }
        var links: [UpgradeSnapshot.Link] = []
        for w in workers {
            for link in w.linksIn.values {
                switch link.caller {
                case .worker(let caller):
                    links.append(UpgradeSnapshot.Link(number: link.number, callee: w.identifier, callerPlugin: caller.identifier))
                case .client(let c):
                    guard let index = connectionIndex[ObjectIdentifier(c)] else { continue }
                    links.append(UpgradeSnapshot.Link(number: link.number, callee: w.identifier, callerConnection: index))
                case .host: continue
                }
            }
        }
        var handoffState: UpgradeSnapshot.Handoff?
        if let handoff = shared.handoff {
            let h = handoff.handOver()
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
            nextLinkNumber: router.nextLinkNumber, notifier: held.map { UpgradeSnapshot.Held(pid: $0.pid, fd: $0.fd, isListener: $0.isListener) }))
    }
}
