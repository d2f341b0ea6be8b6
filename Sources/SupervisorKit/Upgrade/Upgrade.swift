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

/// Upgrading the supervisor in place (SPEC §14; docs/operations.md, "Upgrading the supervisor"):
/// `supervisor upgrade [--binary PATH]` or SIGUSR2. The steps, each of which can still say no and
/// leave everything as it was:
///
/// 1. **Refusals** at once: an embedded supervisor, another upgrade, a shutdown, an install or an
///    update under way, plugins still starting.
/// 2. **The binary is checked** off the loop: a regular executable ELF file of this architecture,
///    which runs (`<binary> upgrade-probe`, within 5 s) and reads this snapshot format.
/// 3. **Quiet**: the supervisor stops taking new requests from control clients (their bytes wait
///    in their sockets, which are handed over unread) and waits until nothing is in flight through
///    it: no request to or from a worker, no client call, no link being given back, no plugin
///    between two phases. Calls in flight are answered first (SPEC §14): how long it waits is
///    `QuietWait`'s rule (SupervisorCore). Calls over direct links go on all along: they do not pass
///    through the supervisor.
/// 4. **Handover** (Handover.swift): reading stops on every socket, what each frame codec held of a
///    frame not yet whole is kept, the seccomp notifier stops between two answers, and the state goes
///    into a snapshot (UpgradeSnapshot) in a sealed memfd. Every descriptor it names loses
///    close-on-exec, and the main thread (which made every child) execs the binary. If the exec
///    fails, all of it is undone and the supervisor serves on.
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
    /// How long it waits for quiet (`QuietWait`).
    var limit = TimeAmount.milliseconds(Int64(QuietWait.quietMs))
    /// The signal relay was paused for the handover (`LifecycleSignals.pauseCaughtRelay`).
    var signalsPaused = false
}

/// Things an upgrade does that are not the engine's.
enum Upgrade {
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
            if record.update.keepsPrevious { return "\(record.identifier)'s update is within its grace period (it may still roll back)" }
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

    /// Quiet was found and the handover to the next binary is under way (its tick is done).
    var isHandingOver: Bool { if case .quieting(let q) = upgrade { q.tick == nil } else { false } }

    /// An upgrade still being checked or waiting for quiet is given up (a shutdown began), its
    /// requester told why at once. One handing over already goes on.
    func cancelUpgrade(because why: String) {
        switch upgrade {
        case .idle: return
        case .checking(let origin):
            // The check's answer finds the phase moved on and closes the binary.
            upgrade = .idle
            upgradeFailed(origin, ErrorBody(.unavailable, "no upgrade: \(why)"))
        case .quieting(let q):
            guard q.tick != nil else { return }
            q.tick?.cancel()
            upgrade = .idle
            resumeReading()
            q.binary.close()
            upgradeFailed(q.origin, ErrorBody(.unavailable, "no upgrade: \(why)"))
        }
    }

    private func startQuieting(_ quieting: Quieting) {
        var quieting = quieting
        // What is in flight to the workers now decides how long to wait for them (QuietWait).
        let inFlight = table.liveWorkers.flatMap { worker in
            worker.pending.values.map { $0.isCall && $0.stream == nil ? QuietWait.InFlight.call(deadline: $0.deadline) : .other }
        }
        quieting.limit = .milliseconds(Int64(QuietWait.milliseconds(inFlight, now: .now)))
        // New clients wait in the listener's queue for whichever binary carries on. Those connected
        // are read on: their new requests wait (ControlSocket's `channelRead`), what their requests
        // in flight need (a stream's credit, a host method's reply) is acted on, so that those end.
        control.server?.setOption(ChannelOptions.autoRead, value: false).whenFailure { _ in }
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
            if NIODeadline.now() - q.since > q.limit {
                q.tick?.cancel()
                upgrade = .idle
                resumeReading()
                lifecycle.keepStandbys()
                q.binary.close()
                return upgradeFailed(q.origin, ErrorBody(.unavailable, "no upgrade: the supervisor was not quiet within \(q.limit.nanoseconds / 1_000_000) ms (\(busy)); nothing changed"))
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
        for connection in control.connections.values {
            connection.channel.setOption(ChannelOptions.autoRead, value: false).whenFailure { _ in }
        }
        q.tick?.cancel()
        q.tick = nil
        // Signals from here on stay pending for whichever binary carries on (the exec keeps them);
        // those the relay passed on before it paused are tasks queued on the loop, which run
        // before the handover does and are kept for the snapshot (`handleSignal`).
        q.signalsPaused = config.handlesSignals && config.ownsProcess && LifecycleSignals.pauseCaughtRelay()
        upgrade = .quieting(q)
        loop.assumeIsolated().execute { [self] in handOver(q) }
    }

    /// What still passes through the supervisor, if anything (nil: quiet).
    func inFlightThroughSupervisor(requester: ReplyOrigin?) -> String? {
        if installs.inFlight > 0 { return "an install is under way" }
        if !hostMethods.isIdle { return "a plugin's call of a host method is in flight" }
        if !lifecycle.spawnPace.backlog.isEmpty || lifecycle.paceTurns.isRequested { return "activations wait for their turn to be spawned" }
        for record in table.inOrder {
            let id = record.identifier
            if !record.waiting.isEmpty { return "requests wait for \(id) (\(Route.waitingFor(record.routeTarget)))" }
            if !record.retiring.isEmpty { return "a worker of \(id) is being stopped" }
            switch record.next {
            case .none, .restart: break
            case .successor: return "\(id) is being updated"
            case .standby: return "\(id) is restarting"
            }
            switch record.phase {
            // Inactive (SPEC §16): nothing of it runs; the snapshot says so and the next binary keeps it.
            case .running, .failed, .stopped, .inactive: break
            case .restarting where record.instance == nil: break
            default: return "\(id) is \(record.phase.shown)"
            }
            guard let worker = record.instance else { continue }
            if worker.phase != .running { return "\(id)'s worker is \(worker.phase)" }
            if !worker.pending.isEmpty {
                let streams = worker.pending.values.filter { $0.stream != nil }.count
                return streams > 0 ? "\(streams) stream call(s) to \(id) in flight" : "\(worker.pending.count) request(s) to \(id) in flight"
            }
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
            serveDeferred(connection)
            guard connection.deferred.isEmpty else { continue }
            connection.channel.setOption(ChannelOptions.autoRead, value: true).whenFailure { _ in }
        }
        for worker in table.liveWorkers {
            worker.channel?.setOption(ChannelOptions.autoRead, value: true).whenFailure { _ in }
        }
    }
}
