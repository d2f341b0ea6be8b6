#if canImport(Glibc)
import Glibc
#endif
import LinuxSupport
import Logging
import NIOCore
import NIOPosix

/// Everything of the supervisor that changes, and the components that change it: confined to the
/// supervisor's event loop, and not `Sendable`, so the compiler refuses to let any of it leave the
/// loop. The public `Supervisor` holds it in a `NIOLoopBound` (checked on every access from
/// outside); other threads (the child watcher, the seccomp notifier, the install queue) reach it
/// the same way, with a `NIOLoopBound` made on the loop before the work left it (`handOff`).
///
/// The components (`Router`, `Lifecycle`, `Health`, `Installs`, `ControlServer`, `Metrics`,
/// `HostMethods`, `SystemdNotify`) are created here and reach each other through it.
final class Engine {
    let config: SupervisorConfig
    let logger: Logger
    let group: MultiThreadedEventLoopGroup
    let loop: EventLoop
    let table: PluginTable
    let outbox: Outbox
    /// Preflight workers of installs: refused on the control socket like any worker. Written by the
    /// install queue, read on the loop, hence the lock (shared with `Supervisor`).
    let preflightPIDs: Locked<Set<pid_t>>
    /// Folders of the Swift runtime the workers map (read-only in their sandbox).
    let runtimePaths: [String]
    /// This process's network namespace (WorkerSpec.hostNetworkNamespace).
    let networkNamespace: UInt64?
    /// What happens to plugins, for the programs that listen (SPEC §12 events).
    let events: EventHub

    private(set) var router: Router!
    private(set) var lifecycle: Lifecycle!
    private(set) var health: Health!
    private(set) var installs: Installs!
    private(set) var control: ControlServer!
    private(set) var metrics: Metrics!
    /// The methods the embedding program provides to plugins (`@host`, SPEC §12).
    private(set) var hostMethods: HostMethods!
    /// systemd's notify protocol, when started by systemd with `Type=notify`.
    private(set) var systemd: SystemdNotify!

    /// Set by `Supervisor.serve` before any worker starts.
    var watcher: ChildWatcher?
    /// Answers for the workers' seccomp filters (nil where it could not start: workers then name
    /// violations themselves, and denials go uncounted).
    var notifier: SeccompNotifier?
    /// Where each worker gets a control group of its own (nil without one: `cgroupsMissing` says why).
    var cgroups: CgroupTree?
    var cgroupsMissing = "sandbox switched off (--no-sandbox)"

    init(config: SupervisorConfig, logger: Logger, group: MultiThreadedEventLoopGroup, preflightPIDs: Locked<Set<pid_t>>,
         runtimePaths: [String], networkNamespace: UInt64?) {
        loop = group.next()
        loop.preconditionInEventLoop()
        self.config = config
        self.logger = logger
        self.group = group
        self.preflightPIDs = preflightPIDs
        self.runtimePaths = runtimePaths
        self.networkNamespace = networkNamespace
        table = PluginTable(loop: loop)
        outbox = Outbox(loop: loop)
        events = EventHub(loop: loop)
        router = Router(self)
        lifecycle = Lifecycle(self)
        health = Health(self)
        installs = Installs(self)
        control = ControlServer(self)
        metrics = Metrics(self)
        hostMethods = HostMethods(self)
        systemd = SystemdNotify(self, endpoint: .from(environment: ProcessEnvironment.all, pid: getpid()))
    }

    /// `values` made ready to travel to another thread and back: only the loop can open them.
    /// Call it on the loop, before the work leaves it.
    func handOff<T>(_ values: T) -> NIOLoopBound<T> {
        NIOLoopBound(values, eventLoop: loop)
    }

    /// SPEC §7: the signals sent to the supervisor's pid.
    func handleSignal(_ signal: Int32) {
        loop.preconditionInEventLoop()
        switch signal {
        case SIGTERM, SIGINT: lifecycle.shutdown(reason: LifecycleSignals.name(signal))
        case SIGUSR1: router.broadcastFromSignal(.memoryWarning)
        case SIGTSTP: router.broadcastFromSignal(.background)
        case SIGCONT: router.broadcastFromSignal(.foreground)
        case SIGHUP: lifecycle.reload { _ in }
        default: break
        }
    }

    /// Whether `pid` is one of our workers (they may never use the control socket).
    func isWorker(pid: Int32) -> Bool { table.worker(pid: pid) != nil || preflightPIDs.withLock { $0.contains(pid) } }
}

extension NIOLoopBound {
    /// Runs `body` on the value's loop, from any thread.
    func execute(_ body: @escaping @Sendable (Value) -> Void) {
        eventLoop.execute { body(self.value) }
    }
}

/// A part of the supervisor. Components are created by `Engine.init`, live as long as it, and run
/// only on its event loop (none is `Sendable`).
protocol SupervisorComponent: AnyObject {
    var engine: Engine { get }
}

extension SupervisorComponent {
    var config: SupervisorConfig { engine.config }
    var logger: Logger { engine.logger }
    var loop: EventLoop { engine.loop }
    var table: PluginTable { engine.table }
    var outbox: Outbox { engine.outbox }
    var router: Router { engine.router }
    var lifecycle: Lifecycle { engine.lifecycle }
    var installs: Installs { engine.installs }
    var events: EventHub { engine.events }
}
