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
import SupervisorCore
import Synchronization

/// The supervisor: starts plugins in dependency order, one sandboxed worker each, routes calls and
/// events between the CLI and the plugins and between plugins, restarts crashed workers and shuts
/// everything down in reverse order (docs/architecture.md).
///
/// This is its public face, callable from any thread: it holds only values that are `Sendable`
/// (the configuration, the event loop, two locked inboxes) and the `Engine`, the loop's own part,
/// in a `NIOLoopBound` that only the loop can open. Whatever the program asks is handed to the loop;
/// the routing path has no lock.
public final class Supervisor: Sendable {
    public let config: SupervisorConfig
    let logger: Logger
    let group: MultiThreadedEventLoopGroup
    let loop: EventLoop
    /// The components and the state they change (Engine.swift).
    let engine: Handed<Engine>
    /// Preflight workers of installs (shared with the engine, which reads it on the loop).
    let preflightPIDs = Guarded<Set<pid_t>>([])
    /// Requests the embedding program submitted that the loop has not taken yet (Host/Embedding.swift).
    let hostInbox = Guarded<[HostSubmission]>([])
    /// Set while `run` serves: `close` stops it.
    private let watcher = Guarded<ChildWatcher?>(nil)
    /// The shutdown promise's future: `run` waits on it.
    private let finished: EventLoopFuture<Void>
    /// What the previous binary handed over, when this one was exec'd by an upgrade in place.
    private let handover: UpgradeHandover?
    /// The embedding program's host methods' bodies (`provide(method:)`), shared with the loop.
    let hostMethodBodies = Guarded<[String: HostMethods.Handler]>([:])
    /// Where other threads hand work to the loop: closed before the loop's group shuts down.
    private let door = LoopDoor()
    /// The main thread's job queue while `run` serves (`supervisor start` only: SpawnerThread).
    private let spawner = Guarded<SpawnerThread?>(nil)
    /// Removes ended workers' groups and folders off the loop; `serve` waits for it before it returns.
    private let janitor: Janitor
    /// A relay for the caught signals was started (`releaseSignals` ends it).
    private let caughtRelay = Guarded(false)

    /// With `config.handlesSignals` in a process of its own (`supervisor start`), blocks the
    /// lifecycle signals first: every thread created from here on (NIO's included) inherits the
    /// mask, and one that comes before the relay waits for it. Either way they are caught, once
    /// the relay starts, with a handler that hands them to it (`LifecycleSignals.catchEverywhere`),
    /// whichever thread takes them: an embedded host's program has threads made before the host
    /// (an async main's, its task pool), whose masks are the program's. Without `handlesSignals`
    /// (an embedded host's default), the process's signals are left alone.
    /// `handover`: what the previous binary handed over, when an upgrade exec'd this one
    /// (`UpgradeHandover.fromEnvironment`); the supervisor then takes over its workers, sockets and
    /// state instead of starting plugins.
    public init(config: SupervisorConfig, logger: Logger, handover: UpgradeHandover? = nil) {
        if config.handlesSignals && config.ownsProcess {
            LifecycleSignals.block()
            LifecycleSignals.blockAlso(SIGUSR2)
        }
        self.handover = handover
        self.config = config
        self.logger = logger
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        self.group = group
        self.loop = group.next()
        let paths = RuntimeFolders.current()
        let namespace = ProcessControl.networkNamespace()
        let preflight = preflightPIDs
        let door = door
        let programBodies = hostMethodBodies
        // Made on its loop, where it stays. `submit` fails only on a loop that was shut down, and
        // this one was made above and is held by nothing else yet.
        let made = loop.submit {
            let engine = Engine(config: config, logger: logger, group: group, preflightPIDs: preflight,
                                runtimePaths: paths, networkNamespace: namespace, door: door, programBodies: programBodies)
            return (engine.handOff(engine), engine.lifecycle.finished.futureResult, engine.shared.janitor)
        }
        do {
            (engine, finished, janitor) = try made.wait()
        } catch {
            preconditionFailure("the supervisor's new event loop refused its first task: \(error)")
        }
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
            _ = try? loop.submit { [engine] in
                let lifecycle = engine.value.lifecycle
                _ = lifecycle.startShutdownPhase()
                _ = lifecycle.endShutdownPhase()
                engine.value.events.finishAll()
                lifecycle.finished.fail(error)
            }.wait()
            if !keepingLoop { shutDownLoop() }
            throw error
        }
        if !keepingLoop { shutDownLoop() }
    }

    /// Ends the event loop of a supervisor run with `keepingLoop`, once `run` has returned (or
    /// when it never ran). Does not wait.
    public func close() {
        // A supervisor that never ran still holds its unsettled shutdown promise (settling a
        // settled one does nothing).
        let error = SupervisorError.home(config.home, "the supervisor was closed")
        engine.execute { $0.lifecycle.finished.fail(error) }
        door.close()
        group.shutdownGracefully { _ in }
        janitor.finish()
        // By now the fork server has ended too (it ends with its socket) and been reaped.
        watcher.withLock { $0 }?.stop()
    }

    /// For an embedded host whose `run` has returned (or failed): the lifecycle signals it caught
    /// get back what the program had for them, and its relay thread ends, so that the program's
    /// Ctrl-C does what it did before. Nothing when no relay started.
    public func releaseSignals() {
        guard caughtRelay.withLock({ started in defer { started = false }; return started }) else { return }
        LifecycleSignals.releaseCaught(also: SIGUSR2)
    }

    /// Ends the event loop: other threads' hand-ins stop first (a child reaped or a signal after
    /// this point is dropped, not scheduled on a loop that has ended).
    private func shutDownLoop() {
        door.close()
        try? group.syncShutdownGracefully()
    }

    private func serve(onReady: @escaping @Sendable (String) -> Void) throws(SupervisorError) {
        // What the config file refuses, a program's own settings may not have either (PluginHost).
        guard config.maxFrameBytes >= SupervisorConfig.smallestFrameLimit else {
            throw .config(file: "(the settings given)", reason: "'maxFrameBytes' is \(config.maxFrameBytes); it is at least \(SupervisorConfig.smallestFrameLimit) (1 MiB: a worker's hello and every command must fit)")
        }
        if config.handlesSignals && config.ownsProcess {
            LifecycleSignals.block()
            LifecycleSignals.blockAlso(SIGUSR2)
        }
        try? ProcessControl.setNotDumpable()
        // The fork server first of all: it loads the worker's code (~3 ms) while the supervisor
        // takes its home, scans the plugin folders and binds its sockets (Lifecycle/WorkerStart.swift).
        // Should the home turn out to be another supervisor's, it ends with this process.
        let childWatcher: ChildWatcher
        do { childWatcher = try ChildWatcher() } catch { throw .home(config.home, "cannot watch workers: \(error)") }
        watcher.withLock { $0 = childWatcher }
        // `supervisor start` makes its children on its main thread, the one an upgrade execs from.
        let spawnerThread: SpawnerThread? = config.handlesSignals && ProcessControl.isMainThread ? SpawnerThread() : nil
        spawner.withLock { $0 = spawnerThread }
        onLoop {
            $0.shared.watcher = childWatcher
            $0.shared.spawner = spawnerThread
            $0.lifecycle.startForkServer()
        }
        try prepareHome()
        let lock: HomeLock
        if let handover {
            lock = HomeLock(adopting: OwnedDescriptor(handover.snapshot.homeLock))
        } else {
            do { lock = try HomeLock(home: config.home) } catch {
                switch error {
                case .held(_, let pid, .supervisor): throw .alreadyRunning(home: config.home, pid: pid)
                case .held(_, let pid, .install):
                    throw .home(config.home, "an offline install (`supervisor install`, pid \(pid)) is installing into it; start the supervisor once it is done")
                case .cannotOpen: throw .home(config.home, "\(error)")
                }
            }
        }
        defer { withExtendedLifetime(lock) {} }
        if let why = lock.unwritten { logger.warning("cannot write this supervisor's pid into \(config.home)/supervisor.lock (\(why)): it holds the home all the same, but another one turned away cannot say whose it is") }
        let lockFD = lock.descriptor
        onLoop { $0.shared.homeLockFD = lockFD }
        // An install interrupted by a crash left its staging folder; the bundles are complete. An
        // update that had not ended is put back as it was before it (and tried again once started).
        // A binary taking over running workers (an upgrade) leaves marked ones for a later start.
        let resuming = handover == nil
        onLoop { $0.installs.interrupted = $0.installs.store.cleanLeftovers(resuming: resuming) }
        janitor.sweepLeftovers()
        var cgroups: CgroupTree?
        var notifier: SeccompNotifier?
        if config.sandboxEnabled {
            var missing = "switched off in the configuration (workerCgroups: false)"
            if let snapshot = handover?.snapshot {
                // The previous binary's tree (its workers' groups are in it).
                cgroups = snapshot.cgroupTree.flatMap { t in CgroupTree.Version(rawValue: t.version).map { CgroupTree.adopt(version: $0, bases: t.bases) } }
                missing = snapshot.cgroupsMissing
            } else if config.workerCgroups {
                (cgroups, missing) = CgroupTree.detect()
            }
            if let cgroups { logger.debug("a cgroup \(cgroups.version.rawValue) group for each worker") }
            do { notifier = try SeccompNotifier() } catch {
                logger.warning("cannot answer for the workers' seccomp filters (\(error)): violations are named by the workers, denials are not counted")
            }
            onLoop { [cgroups, notifier, missing] in
                $0.shared.cgroups = cgroups
                $0.shared.cgroupsMissing = missing
                $0.shared.notifier = notifier
            }
        }
        // Every worker has been reaped by the time `serve` returns: their groups are empty, and the
        // watcher threads have nothing left to watch (an embedded host's program goes on without them).
        defer {
            janitor.finish()
            cgroups?.removeAll()
            notifier?.stop()
        }
        let relaySignals = { [engine, caughtRelay, logger] in
            let relay: @Sendable (Int32) -> Void = { signal in engine.execute { $0.handleSignal(signal) } }
            do {
                try LifecycleSignals.catchEverywhere(also: SIGUSR2)
                caughtRelay.withLock { $0 = true }
                LifecycleSignals.startCaughtRelay(also: SIGUSR2, relay)
            } catch {
                logger.warning("cannot catch the lifecycle signals (\(error)): they reach the supervisor only where they are blocked, and end the program on other threads")
                LifecycleSignals.startRelay(also: SIGUSR2, relay)
            }
        }
        // Signals are read from here on (a SIGTERM during start-up stops it), but after an
        // upgrade's exec only once the workers are taken over: one that came during the handover
        // waits (pending, or in the handler's pipe) until then, instead of finding an empty plugin table.
        if config.handlesSignals && handover == nil { relaySignals() }
        onLoop { $0.lifecycle.loadPlugins() }
        let snapshot = handover?.snapshot
        // However `serve` ends from here on, a failure too: the hand-off stops and lets go of the
        // engine (its callbacks hold the engine, which holds it: neither would ever be freed), and
        // the control socket closes and its file goes (also after a shutdown asked for before the
        // socket was bound: an embedded host stopped right after `run`).
        defer {
            _ = try? loop.flatSubmit { [engine] in
                engine.value.handoff?.stop()
                engine.value.handoff = nil
                return engine.value.control.close()
            }.wait()
        }
        if config.servesControlSocket {
            let server: Channel
            if let fd = snapshot?.controlListener {
                server = try ControlServer.adopt(listener: fd, config: config, group: group, engine: engine) { try self.wait(for: $0) }
            } else {
                server = try ControlServer.bind(config: config, group: group, engine: engine) { try self.wait(for: $0) }
            }
            onLoop { $0.control.listening(on: server) }
            let handoffExpiring: @Sendable (Int64) -> Void = { [engine] until in
                engine.execute { $0.shared.deadlines.due(monotonicNanoseconds: until) }
            }
            if let kept = snapshot?.handoff {
                let handoff = LinkHandoff.adopt(controlSocket: config.socketPath, listener: kept.listener, offers: kept.offers,
                                                deposits: kept.deposits, maxPayloadBytes: config.maxPayloadMB << 20,
                                                expiring: handoffExpiring)
                onLoop { $0.handoff = handoff }
            } else if config.peerLinks {
                do {
                    let handoff = try LinkHandoff.start(controlSocket: config.socketPath, maxPayloadBytes: config.maxPayloadMB << 20,
                                                        expiring: handoffExpiring)
                    onLoop { $0.handoff = handoff }
                } catch {
                    logger.warning("cannot serve clients' direct links (\(error)): their calls go through the supervisor")
                }
            }
        }
        let metricsServer = try MetricsServer.start(config: config, logger: logger, engine: engine, adopting: snapshot?.metricsListener) {
            try self.wait(for: $0)
        }
        defer { metricsServer?.close(promise: nil) }
        do {
            onLoop { [handover] in
                $0.metricsListener = metricsServer
                $0.systemd.start()
                if let handover { $0.resume(handover) } else { $0.lifecycle.startAll(onReady: onReady) }
            }
            if config.handlesSignals && handover != nil { relaySignals() }
            try wait(for: finished)
        } catch {
            throw .home(config.home, "the event loop failed: \(error)")
        }
    }

    /// How many supervisors' engines (their plugin tables, timers and components) this process
    /// holds: one a running supervisor; a stopped one that is released holds none (an embedded
    /// host's program can make one host after another).
    package static var enginesAlive: Int { Engine.alive.load(ordering: .relaxed) }

    /// Runs `body` on the loop with the engine and waits for it (only from another thread).
    private func onLoop(_ body: @escaping @Sendable (Engine) -> Void) {
        _ = try? wait(for: loop.submit { [engine] in body(engine.value) })
    }

    /// Waits for `future`; on the main thread of `supervisor start`, serving the spawner's jobs
    /// meanwhile (the loop may need a child made while the main thread waits for it).
    private func wait<T: Sendable>(for future: EventLoopFuture<T>) throws -> T {
        if let spawner = spawner.withLock({ $0 }), spawner.isCurrent {
            let done = Guarded(false)
            future.whenComplete { _ in
                done.withLock { $0 = true }
                spawner.finish()
            }
            spawner.serve(until: { done.withLock { $0 } })
        }
        return try future.wait()
    }

    func prepareHome() throws(SupervisorError) {
        do {
            try FileSystem.makeDirectories(config.home)
        } catch {
            throw .home(config.home, "\(error)")
        }
        // Before anything in it is used: its plugins' data folders become their workers' to write.
        if let why = FileSystem.writableByOthers(config.home) { throw .home(config.home, why) }
        do {
            for folder in ["/data", "/live", "/plugins"] { try FileSystem.makeDirectories(config.home + folder) }
        } catch {
            throw .home(config.home, "\(error)")
        }
    }
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
            return "another supervisor (\(pid == "?" ? "its pid is not in the lock file" : "pid \(pid)")) is already running with home \(home); stop it with `supervisor stop`, or give this one another home (--home; a PluginHost's Configuration(home:))"
        case .controlSocket(let path, let why): return "cannot listen on the control socket \(path): \(why)"
        case .config(let file, let reason): return "config \(file): \(reason)"
        }
    }
}
