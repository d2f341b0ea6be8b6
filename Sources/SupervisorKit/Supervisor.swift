#if canImport(Glibc)
import Glibc
#endif
import Bundles
import Dispatch
import LinuxSupport
import Logging
import NIOCore
import NIOPosix
import PluginProtocol
import Synchronization

/// The supervisor: starts plugins in dependency order, one sandboxed worker each, routes calls and
/// events between the CLI and the plugins and between plugins, restarts crashed workers and shuts
/// everything down in reverse order (docs/architecture.md).
///
/// It is made of components, each a file or folder here, that share one event loop (`loop`):
/// `PluginTable` (State/) owns the plugins and their workers; `Lifecycle` starts, restarts and stops
/// them; `Router` moves frames; `Health` runs the timers; `Installs` talks to the installer
/// process; `ControlServer` serves the CLI. Everything they mutate is confined to that loop; other
/// threads (the child watcher, the seccomp notifier, the signal thread, the install queue) hand their results to it with
/// `loop.execute`. That keeps the routing path free of locks.
public final class Supervisor: @unchecked Sendable {
    // @unchecked: the `let`s are immutable; everything mutable belongs to `loop` (see above).
    public let config: SupervisorConfig
    let logger: Logger
    let group: MultiThreadedEventLoopGroup
    let loop: EventLoop
    let table: PluginTable
    let outbox: Outbox
    /// Preflight workers of installs: refused on the control socket like any worker. Written by the
    /// install queue, read on the loop, hence the lock.
    let preflightPIDs = Locked<Set<pid_t>>([])
    /// Folders of the Swift runtime the workers map (read-only in their sandbox).
    let runtimePaths: [String]
    /// This process's network namespace (WorkerSpec.hostNetworkNamespace).
    let networkNamespace = ProcessControl.networkNamespace()

    private(set) var router: Router!
    private(set) var lifecycle: Lifecycle!
    private(set) var health: Health!
    private(set) var installs: Installs!
    private(set) var control: ControlServer!
    private(set) var metrics: Metrics!
    /// What happens to plugins, for the programs that listen (SPEC §12 events).
    let events: EventHub
    /// Requests the embedding program submitted that the loop has not taken yet (Host/Embedding.swift).
    let hostInbox = Locked<[HostSubmission]>([])
    /// The methods the embedding program provides to plugins (`@host`, SPEC §12).
    private(set) var hostMethods: HostMethods!
    /// systemd's notify protocol, when started by systemd with `Type=notify` (else nil).
    private(set) var systemd: SystemdNotify!
    private(set) var watcher: ChildWatcher?
    /// Answers for the workers' seccomp filters (nil where it could not start: workers then name
    /// violations themselves, and denials go uncounted).
    private(set) var notifier: SeccompNotifier?
    /// Where each worker gets a control group of its own (nil without one: `cgroupsMissing` says why).
    private(set) var cgroups: CgroupTree?
    private(set) var cgroupsMissing = "sandbox switched off (--no-sandbox)"

    /// With `config.handlesSignals`, blocks the lifecycle signals first: every thread created from
    /// here on (NIO's included) inherits the mask, so the signals reach only the relay thread's
    /// sigwaitinfo. Without it (an embedded host), the process's signals are left alone.
    public init(config: SupervisorConfig, logger: Logger) {
        if config.handlesSignals { LifecycleSignals.block() }
        self.config = config
        self.logger = logger
        self.group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        self.loop = group.next()
        self.table = PluginTable(loop: loop)
        self.outbox = Outbox(loop: loop)
        self.runtimePaths = RuntimeFolders.current()
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

    /// Runs until shut down (SIGTERM, SIGINT, `supervisor stop`). Create the supervisor on the main
    /// thread before any other thread exists, so the lifecycle signals are blocked everywhere.
    /// `onReady` is called once with the line to print when every startable plugin has started.
    /// With `keepingLoop` (an embedded host) the event loop outlives `run`, so that requests made
    /// after the end are answered (`unavailable`) rather than dropped, until `close()`.
    public func run(keepingLoop: Bool = false, onReady: @escaping @Sendable (String) -> Void) throws(SupervisorError) {
        do {
            try serve(onReady: onReady)
        } catch {
            // Nothing ran: settle the shutdown promise (and stop the loop), so the supervisor ends
            // with the error (exit 1) rather than a leaked promise.
            _ = try? loop.submit { [self] in
                _ = lifecycle.startShutdownPhase()
                _ = lifecycle.endShutdownPhase()
                events.finishAll()
                lifecycle.finished.fail(error)
            }.wait()
            if !keepingLoop { try? group.syncShutdownGracefully() }
            throw error
        }
        if !keepingLoop { try? group.syncShutdownGracefully() }
    }

    /// Ends the event loop of a supervisor run with `keepingLoop`, once `run` has returned (or
    /// when it never ran). Does not wait.
    public func close() {
        // A supervisor that never ran still holds its unsettled shutdown promise (settling a
        // settled one does nothing).
        let finished = lifecycle.finished
        let error = SupervisorError.home(config.home, "the supervisor was closed")
        loop.execute { finished.fail(error) }
        group.shutdownGracefully { _ in }
        // By now the fork server has ended too (it ends with its socket) and been reaped.
        watcher?.stop()
    }

    private func serve(onReady: @escaping @Sendable (String) -> Void) throws(SupervisorError) {
        if config.handlesSignals { LifecycleSignals.block() }
        try? ProcessControl.setNotDumpable()
        // The fork server first of all: it loads the worker's code (~3 ms) while the supervisor
        // takes its home, scans the plugin folders and binds its sockets (Lifecycle/WorkerStart.swift).
        // Should the home turn out to be another supervisor's, it ends with this process.
        do { watcher = try ChildWatcher() } catch { throw .home(config.home, "cannot watch workers: \(error)") }
        _ = try? loop.submit { self.lifecycle.startForkServer() }.wait()
        try prepareHome()
        let lock: HomeLock
        do { lock = try HomeLock(home: config.home) } catch {
            switch error {
            case .held(_, let pid): throw .alreadyRunning(home: config.home, pid: pid)
            case .cannotOpen: throw .home(config.home, "\(error)")
            }
        }
        defer { withExtendedLifetime(lock) {} }
        // An install interrupted by a crash left its staging folder; the bundles are complete.
        installs.store.cleanLeftovers()
        if config.sandboxEnabled {
            if config.workerCgroups {
                (cgroups, cgroupsMissing) = CgroupTree.detect()
            } else {
                cgroupsMissing = "switched off in the configuration (workerCgroups: false)"
            }
            if let cgroups { logger.debug("a cgroup \(cgroups.version.rawValue) group for each worker") }
            do { notifier = try SeccompNotifier() } catch {
                logger.warning("cannot answer for the workers' seccomp filters (\(error)): violations are named by the workers, denials are not counted")
            }
        }
        // Every worker has been reaped by the time `serve` returns: their groups are empty, and the
        // watcher threads have nothing left to watch (an embedded host's program goes on without them).
        defer {
            cgroups?.removeAll()
            notifier?.stop()
        }
        if config.handlesSignals {
            LifecycleSignals.startRelay { [self] signal in loop.execute { self.handleSignal(signal) } }
        }
        do { try loop.submit { self.lifecycle.loadPlugins() }.wait() } catch {
            throw .home(config.home, "the event loop failed: \(error)")
        }
        if config.servesControlSocket { try control.bind() }
        let metricsServer = try MetricsServer.start(self)
        defer { metricsServer?.close(promise: nil) }
        do {
            try loop.submit {
                self.systemd.start()
                self.lifecycle.startAll(onReady: onReady)
            }.wait()
            try lifecycle.finished.futureResult.wait()
        } catch {
            throw .home(config.home, "the event loop failed: \(error)")
        }
        // A shutdown asked for before the socket was bound (an embedded host stopped right after
        // `run`) finished without it: the socket closes, and its file goes, here.
        _ = try? loop.flatSubmit { self.control.close() }.wait()
    }

    func prepareHome() throws(SupervisorError) {
        do {
            for folder in ["", "/data", "/live", "/plugins"] { try FileSystem.makeDirectories(config.home + folder) }
        } catch {
            throw .home(config.home, "\(error)")
        }
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

/// A part of the supervisor. Components are created by `Supervisor.init`, live as long as it, and
/// run only on its event loop (hence `@unchecked Sendable` on each: closures scheduled on the loop
/// carry them back to it).
protocol SupervisorComponent: AnyObject {
    var supervisor: Supervisor { get }
}

extension SupervisorComponent {
    var config: SupervisorConfig { supervisor.config }
    var logger: Logger { supervisor.logger }
    var loop: EventLoop { supervisor.loop }
    var table: PluginTable { supervisor.table }
    var outbox: Outbox { supervisor.outbox }
    var router: Router { supervisor.router }
    var lifecycle: Lifecycle { supervisor.lifecycle }
    var installs: Installs { supervisor.installs }
    var events: EventHub { supervisor.events }
}

/// Why the supervisor could not start or keep running: SupervisorKit's one error type (the CLI's
/// side of the control socket has `SupervisorClient.Failure`).
public enum SupervisorError: Error, CustomStringConvertible {
    case home(String, String)
    case alreadyRunning(home: String, pid: String)
    case controlSocket(String, String)
    /// The config file (`--config`) is unreadable or holds a setting it cannot take.
    case config(file: String, reason: String)

    public var description: String {
        switch self {
        case .home(let home, let why): return "cannot use the home folder \(home): \(why)"
        case .alreadyRunning(let home, let pid):
            return "another supervisor (pid \(pid)) is already running with home \(home); stop it with `supervisor stop`, or give this one another --home"
        case .controlSocket(let path, let why): return "cannot listen on the control socket \(path): \(why)"
        case .config(let file, let reason): return "config \(file): \(reason)"
        }
    }
}
