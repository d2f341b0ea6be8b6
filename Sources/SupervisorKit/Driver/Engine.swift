#if canImport(Glibc)
import Glibc
#endif
import LinuxSupport
import Logging
import NIOCore
import PluginProtocol
import Protocol
import NIOPosix
import SupervisorCore
import Synchronization

/// The supervisor's one driver: it holds the components and carries out what they ask of each
/// other (`Effect`, Driver/CarryOut.swift), and it is where inputs come in: frames from workers
/// and control clients, children's exits, timers, signals. Confined to the supervisor's event loop,
/// and not `Sendable`, so the compiler refuses to let any of it leave the loop. The public
/// `Supervisor` holds it in a `NIOLoopBound` (checked on every access from outside); other threads
/// (the child watcher, the seccomp notifier, the install queue) reach the loop the same way, with a
/// `NIOLoopBound` made on the loop before the work left it (`Shared.handOff`).
///
/// The components (`Router`, `Lifecycle`, `Health`, `Installs`, `ControlServer`, `HostMethods`)
/// see `Shared` and never each other.
final class Engine: SeesShared {
    let shared: Shared
    let group: MultiThreadedEventLoopGroup

    let router: Router
    let lifecycle: Lifecycle
    let health: Health
    let installs: Installs
    let control: ControlServer
    /// The methods the embedding program provides to plugins (`@host`, SPEC §12).
    let hostMethods: HostMethods
    /// Where control clients pick up their direct links (nil: no control socket, or links off).
    var handoff: LinkHandoff? {
        get { shared.handoff }
        set { shared.handoff = newValue }
    }
    /// The embedding program's direct links (`Supervisor.linkForHost`), once it asked for one.
    private(set) var hostLinks: HostCaller?

    func hostCaller(_ unlink: @escaping @Sendable (UInt64, @escaping @Sendable () -> Void) -> Void) -> HostCaller {
        if let known = hostLinks { return known }
        let made = HostCaller(unlink: unlink)
        hostLinks = made
        return made
    }

    /// An upgrade in place, from its check to its exec (Upgrade/Upgrade.swift).
    var upgrade = UpgradePhase.idle
    /// Signals that came while an upgrade handed over (`UpgradeSnapshot.signals`): acted on by the
    /// next binary, or here if the handover fails.
    var signalsDuringHandover: [Int32] = []
    /// Upgrades this process has been through (the snapshot carries the count on).
    var upgrades = 0
    /// The metrics listener (`metricsListen`), handed over in an upgrade.
    var metricsListener: Channel?
    /// `status`'s last answer, plugin by plugin: only what changed is written again.
    var statusAnswers = PluginStatus.Answers()


    /// Engines in this process (`Supervisor.enginesAlive`).
    static let alive = Atomic<Int>(0)

    deinit { Self.alive.subtract(1, ordering: .relaxed) }

    init(config: SupervisorConfig, logger: Logger, group: MultiThreadedEventLoopGroup, preflightPIDs: Guarded<Set<pid_t>>,
         runtimePaths: [String], networkNamespace: UInt64?, door: LoopDoor, programBodies: Guarded<[String: HostMethods.Handler]>) {
        Self.alive.add(1, ordering: .relaxed)
        let shared = Shared(config: config, logger: logger, loop: group.next(), preflightPIDs: preflightPIDs,
                            runtimePaths: runtimePaths, networkNamespace: networkNamespace, door: door)
        self.shared = shared
        self.group = group
        router = Router(shared)
        lifecycle = Lifecycle(shared)
        health = Health(shared)
        installs = Installs(shared)
        control = ControlServer(shared)
        hostMethods = HostMethods(shared, programBodies: programBodies)
        shared.effects.carryOut = { [unowned self] in carryOut($0) }
        shared.deadlines.check = { [unowned self] in checkDeadlines(at: $0) }
    }

    /// SPEC §7: the signals sent to the supervisor's pid.
    func handleSignal(_ signal: Int32) {
        loop.preconditionInEventLoop()
        // Handing over to the next binary: it acts on the signal once it has taken over (or this
        // binary does, if the handover fails), rather than a shutdown or a rescan racing the exec.
        if isHandingOver { return signalsDuringHandover.append(signal) }
        switch signal {
        case SIGTERM, SIGINT:
            cancelUpgrade(because: "the supervisor is shutting down")
            lifecycle.shutdown(reason: LifecycleSignals.name(signal))
        case SIGUSR1: shared.broadcastFromSignal(.memoryWarning)
        case SIGTSTP: shared.broadcastFromSignal(.background)
        case SIGCONT: shared.broadcastFromSignal(.foreground)
        case SIGHUP: lifecycle.reload { _ in }
        case SIGUSR2: upgradeCommand(binary: nil, origin: nil)
        default: break
        }
    }

    /// Whether `pid` is one of our workers (they may never use the control socket).
    func isWorker(pid: Int32) -> Bool { shared.isWorker(pid: pid) }

    // MARK: Inputs

    /// One frame from a worker's socket.
    func workerFrame(_ instance: WorkerInstance, _ frame: ByteBuffer) {
        // A call to the program's own methods (`@host`) is the one thing routing hands back at once:
        // its parameters are read from the frame while it is at hand.
        if let hostCall = router.workerFrame(instance, frame) {
            frame.withUnsafeReadableBytes { bytes in
                hostMethods.call(from: instance, id: hostCall.id, hostCall.env, bytes)
            }
        }
    }

    /// The health checks' timers, and the deadlines kept while plugins run.
    func startTimers() {
        health.start()
        shared.deadlines.start()
    }

    /// Every worker has ended (or an upgrade hands over). A last check first: a shutdown quicker than
    /// the timer's next tick (no worker to wait for) still answers what waits for a plugin
    /// (`unavailable`, the supervisor is shutting down) before the control socket closes.
    func stopTimers() {
        health.stop()
        if shared.isShuttingDown { _ = checkDeadlines(at: .now()) }
        shared.deadlines.stop()
    }

    /// What is due at `now` is settled: requests in flight and waiting past their deadline, the
    /// handoff's unclaimed descriptors. Returns the earliest deadline left.
    private func checkDeadlines(at now: NIODeadline) -> NIODeadline? {
        let next = [shared.expire(now: now), router.expireWaiting(now: now),
                    shared.handoff?.sweep().map(DeadlineTimer.deadline(monotonicNanoseconds:))]
        return next.compactMap { $0 }.min()
    }
}


