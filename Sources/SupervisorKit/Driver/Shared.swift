#if canImport(Glibc)
import Glibc
#endif
import LinuxSupport
import Logging
import NIOCore
import PluginProtocol
import SupervisorCore

/// What every component may use, and nothing that decides: the state they all read (the plugin
/// table, the supervisor's phase), the devices they write to (the outbox, the event hub, metrics,
/// systemd's notify socket, the log), the host's facilities (child watcher, seccomp notifier,
/// cgroups), and the queue of what they ask of each other (`effects`). No component is in it: a
/// component reaches another only by posting an `Effect`, which the engine (the one driver) carries out.
///
/// Confined to the supervisor's event loop like everything it holds; not `Sendable`.
final class Shared {
    let config: SupervisorConfig
    let logger: Logger
    let loop: EventLoop
    let table: PluginTable
    let outbox: Outbox
    /// What happens to plugins, for the programs that listen (SPEC §12 events).
    let events: EventHub
    /// The supervisor's metrics (they read the table when scraped).
    private(set) lazy var metrics = Metrics(self)
    /// systemd's notify protocol, when started by systemd with `Type=notify` (its status reads the table).
    private(set) lazy var systemd = SystemdNotify(self, endpoint: .from(environment: ProcessEnvironment.all, pid: getpid()))
    /// What components ask of each other, carried out by the engine (Effects.swift).
    let effects: Effects
    /// Where other threads come in (`handOff`); the supervisor closes it before the loop shuts down.
    let door: LoopDoor
    /// The timer behind every request's deadline: whoever sets one tells it (`due`).
    let deadlines: DeadlineTimer
    /// Removes ended workers' groups and temporary folders off the loop (`Supervisor.serve` waits for it).
    let janitor: Janitor
    /// Preflight workers of installs: refused on the control socket like any worker. Written by the
    /// install queue, read on the loop, hence the lock (shared with `Supervisor`).
    let preflightPIDs: Guarded<Set<pid_t>>
    /// Folders of the Swift runtime the workers map (read-only in their sandbox).
    let runtimePaths: [String]
    /// This process's network namespace (WorkerSpec.hostNetworkNamespace).
    let networkNamespace: UInt64?

    /// Whether each answered request is logged (debug level), with its trace id and duration.
    let logCalls: Bool

    /// The supervisor as a whole: written by `Lifecycle` only, read by all.
    var phase = SupervisorPhase.starting
    var isShuttingDown: Bool { phase == .shuttingDown || phase == .finished }

    /// Set by `Supervisor.serve` before any worker starts.
    var watcher: ChildWatcher?
    /// The home's lock file, held (handed over in an upgrade).
    var homeLockFD: Int32?
    /// The thread that makes children and execs an upgrade (`supervisor start`'s main thread; nil
    /// for an embedded supervisor, whose children the loop makes).
    var spawner: SpawnerThread?
    /// Answers for the workers' seccomp filters (nil where it could not start: workers then name
    /// violations themselves, and denials go uncounted).
    var notifier: SeccompNotifier?
    /// Where each worker gets a control group of its own (nil without one: `cgroupsMissing` says why).
    var cgroups: CgroupTree?
    var cgroupsMissing = "sandbox switched off (--no-sandbox, or \"sandbox\": false in the configuration)"
    /// Where control clients pick up descriptors: their direct links' ends and the bytes of
    /// answers passed as descriptors (Routing/LinkHandoff.swift; nil without a control socket).
    var handoff: LinkHandoff?
    /// The allocator's trim, due once a second has passed without another (`trimMemoryWhenQuiet`).
    var trimWhenQuiet: Scheduled<Void>?
    /// Connections to the metrics endpoint open now (at most `MetricsServer.connectionsMax`).
    /// The metrics endpoint's connections, with when each last completed a request (or opened).
    var metricsConnections: [ObjectIdentifier: (channel: Channel, since: NIODeadline)] = [:]
    /// Missing sandbox layers already warned about (once each).
    private var warnedMissingLayers = Set<String>()

    init(config: SupervisorConfig, logger: Logger, loop: EventLoop, preflightPIDs: Guarded<Set<pid_t>>,
         runtimePaths: [String], networkNamespace: UInt64?, door: LoopDoor) {
        loop.preconditionInEventLoop()
        self.door = door
        self.config = config
        self.logger = logger
        self.loop = loop
        self.preflightPIDs = preflightPIDs
        self.runtimePaths = runtimePaths
        self.networkNamespace = networkNamespace
        logCalls = logger.logLevel <= .debug
        table = PluginTable(loop: loop)
        outbox = Outbox(loop: loop)
        events = EventHub(loop: loop, outbox: outbox, door: door)
        effects = Effects(loop: loop)
        deadlines = DeadlineTimer(loop: loop)
        janitor = Janitor(folder: config.home + "/tmp")
    }

    /// `values` made ready to travel to another thread and back: only the loop can open them.
    /// Call it on the loop, before the work leaves it.
    func handOff<T>(_ values: T) -> Handed<T> {
        Handed(values, eventLoop: loop, door: door)
    }

    /// Runs `body` on the spawner thread (and waits), or here without one: children are made there.
    func onSpawnerThread(_ body: () -> Void) {
        if let spawner { spawner.sync(body) } else { body() }
    }

    /// Whether `pid` is one of our workers (they may never use the control socket).
    func isWorker(pid: Int32) -> Bool { table.worker(pid: pid) != nil || preflightPIDs.withLock { $0.contains(pid) } }

    /// Warns once per missing sandbox layer (a host property: every worker would say the same).
    /// `who`: "workers" or "the installer", for the log line; `reporter`: the plugin whose worker
    /// said it first (its `hello` is plugin code's to forge: the line names whose word it is).
    /// Distinct reports are kept up to `WorkerMessage.helloListLimit` (a host lacks a few layers;
    /// more are a plugin's inventions, each restart with new ones).
    func noteMissingLayers(_ missing: [String], who: String = "workers", reporter: String? = nil) {
        for layer in missing where !warnedMissingLayers.contains(who + layer) {
            guard warnedMissingLayers.count < WorkerMessage.helloListLimit else {
                if warnedMissingLayers.insert("").inserted {
                    logger.warning("more than \(WorkerMessage.helloListLimit) different sandbox layers reported missing\(reporter.map { " (the last by \($0)'s worker)" } ?? ""); no more are logged")
                }
                return
            }
            warnedMissingLayers.insert(who + layer)
            logger.warning("sandbox layer missing on this host: \(layer); \(who) run\(who == "workers" ? "" : "s") without it\(reporter.map { " (said first by \($0)'s worker)" } ?? "")")
        }
    }
}

/// The supervisor as a whole.
enum SupervisorPhase: Equatable {
    /// Plugins are coming up; the ready line has not been printed.
    case starting
    /// Every startable plugin started once; `launch` went out.
    case launched
    case shuttingDown
    /// Every worker has ended; the control socket is closing.
    case finished
}

/// What sees `Shared`: the engine, and every component.
protocol SeesShared: AnyObject {
    var shared: Shared { get }
}

/// A part of the supervisor. Components are created by `Engine.init`, live as long as it, and run
/// only on its event loop (none is `Sendable`). Each sees `Shared` and no other component: what it
/// needs of another, it posts as an `Effect`.
protocol SupervisorComponent: SeesShared {}

extension SeesShared {
    /// Borrowed, not copied: a read of one setting (per call, per worker on a tick) must not copy
    /// the whole configuration, with its strings and arrays, each time.
    var config: SupervisorConfig { _read { yield shared.config } }
    var logger: Logger { shared.logger }
    var loop: EventLoop { shared.loop }
    var table: PluginTable { shared.table }
    var outbox: Outbox { shared.outbox }
    var events: EventHub { shared.events }
    var metrics: Metrics { shared.metrics }
    var effects: Effects { shared.effects }
    var deadlines: DeadlineTimer { shared.deadlines }
    var systemd: SystemdNotify { shared.systemd }
    var isShuttingDown: Bool { shared.isShuttingDown }
    func handOff<T>(_ values: T) -> Handed<T> { shared.handOff(values) }
}
