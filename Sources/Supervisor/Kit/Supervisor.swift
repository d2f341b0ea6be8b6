import Bundles
import Dispatch
import IPC
import LinuxSupport
import Logging
import NIOCore
import NIOPosix
import Synchronization
import PluginProtocol
#if canImport(Glibc)
import Glibc
#endif

/// The supervisor: starts plugins in dependency order, one sandboxed worker each, routes calls and
/// events between the CLI and the plugins and between plugins, restarts crashed workers and shuts
/// everything down in reverse order.
///
/// All state is confined to one NIO event loop (`loop`); other threads (the child reaper, the signal
/// thread) hop onto it. That keeps the routing path free of locks.
public final class Supervisor: @unchecked Sendable {
    public let config: SupervisorConfig
    let group: MultiThreadedEventLoopGroup
    let loop: EventLoop
    var logger: Logger

    var catalog: PluginCatalog
    var records: [String: PluginRecord] = [:]
    /// Start order (dependencies first).
    var order: [String] = []
    var byPID: [pid_t: WorkerInstance] = [:]
    /// Channels written to since the last flush; flushed once per read batch.
    var dirty: [ObjectIdentifier: Channel] = [:]
    var launched = false
    var shuttingDown = false
    var controlServer: Channel?
    var watcher: ChildWatcher?
    var onReady: (@Sendable (String) -> Void)?
    let finished: EventLoopPromise<Void>
    var timers: [RepeatedTask] = []
    var runtimePaths: [String] = []
    /// Installs run here, one at a time, off the event loop.
    let installQueue = DispatchQueue(label: "supervisor.installs")
    /// Preflight workers of installs (they may not use the control socket either).
    let preflightPIDs = Mutex<Set<pid_t>>([])
    /// Callers waiting for an on-demand install, by plugin.
    var onDemandWaiters: [String: [(ErrorBody?) -> Void]] = [:]
    /// Missing sandbox layers already warned about (once each).
    var warnedMissingLayers = Set<String>()

    /// Blocks the lifecycle signals first: every thread created from here on (NIO's included)
    /// inherits the mask, so the signals reach only the relay thread's sigwaitinfo.
    public init(config: SupervisorConfig, logger: Logger) {
        LifecycleSignals.block()
        self.config = config
        self.logger = logger
        self.group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        self.loop = group.next()
        self.finished = loop.makePromise()
        self.catalog = PluginCatalog(manifests: [])
    }

    /// Runs until shut down (SIGTERM, SIGINT, `supervisor stop`). Create the supervisor on the main
    /// thread before any other thread exists, so the lifecycle signals are blocked everywhere.
    /// `onReady` is called once with the line to print when every startable plugin has started.
    public func run(onReady: @escaping @Sendable (String) -> Void) throws {
        LifecycleSignals.block()
        try? ProcessControl.setNotDumpable()
        self.onReady = onReady
        try prepareHome()
        let lock: HomeLock
        do { lock = try HomeLock(home: config.home) } catch {
            switch error {
            case .held(_, let pid): throw SupervisorError.alreadyRunning(home: config.home, pid: pid)
            case .cannotOpen: throw SupervisorError.home(config.home, "\(error)")
            }
        }
        defer { withExtendedLifetime(lock) {} }
        runtimePaths = RuntimeFolders.current()
        // An install interrupted by a crash left its staging folder; the bundles are complete.
        store.cleanLeftovers()
        do { watcher = try ChildWatcher() } catch { throw SupervisorError.home(config.home, "cannot watch workers: \(error)") }
        LifecycleSignals.startRelay { [self] signal in loop.execute { self.handleSignal(signal) } }
        try bindControlSocket()
        try loop.submit { self.startAll() }.wait()
        try finished.futureResult.wait()
        try? group.syncShutdownGracefully()
    }

    // MARK: Home, lock, control socket

    func prepareHome() throws {
        do {
            try FileSystem.makeDirectories(config.home)
            try FileSystem.makeDirectories(config.home + "/data")
            try FileSystem.makeDirectories(config.home + "/live")
            try FileSystem.makeDirectories(config.home + "/plugins")
        } catch {
            throw SupervisorError.home(config.home, "\(error)")
        }
    }

    func bindControlSocket() throws {
        let path = config.socketPath
        if let slash = path.lastIndex(of: "/") {
            try? FileSystem.makeDirectories(String(path[..<slash]))
        }
        // We hold the home's lock, so a socket file left in the home is stale; one elsewhere may belong
        // to a supervisor with another home: refuse rather than take it over.
        if FileSystem.exists(path) {
            if let probe = try? BlockingConnection.connect(path: path) {
                probe.close()
                throw SupervisorError.controlSocket(path, "another supervisor is listening there; give this one another --socket")
            }
            unlink(path)
        }
        let old = umask(0o077)
        defer { umask(old) }
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(ChannelOptions.backlog, value: 128)
            .childChannelOption(ChannelOptions.writeBufferWaterMark, value: Self.waterMark)
            .childChannelInitializer { [self] channel in
                channel.eventLoop.makeCompletedFuture {
                    let connection = ControlConnection(channel: channel)
                    try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(FrameCodec(maxBody: config.maxFrameBytes)))
                    try channel.pipeline.syncOperations.addHandler(ControlHandler(supervisor: self, connection: connection))
                }
            }
        do {
            controlServer = try bootstrap.bind(unixDomainSocketPath: path).wait()
        } catch {
            throw SupervisorError.controlSocket(path, "\(error)")
        }
        chmod(path, 0o600)
    }

    // MARK: Starting

    func startAll() {
        catalog = PluginCatalog(directories: config.pluginDirectories)
        for problem in catalog.problems { logger.error("\(problem)") }
        order = catalog.order
        for id in order {
            let manifest = catalog.all[id]!
            let record = PluginRecord(manifest: manifest, state: .waiting)
            if let reason = catalog.unstartable[id] {
                record.state = .failed
                record.problem = reason
                logger.error("\(reason); \(id) will not start")
            }
            records[id] = record
        }
        let found = order.count
        logger.info("found \(found) plugin\(found == 1 ? "" : "s") in \(config.pluginDirectories.joined(separator: ", "))")
        startTimers()
        startWaitingPlugins()
    }

    /// Brings waiting plugins up. Workers are spawned at once, all in parallel (exec, sandbox, dlopen
    /// and hello cost the same whatever the order); a plugin gets `startup` only once every
    /// dependency is running. One whose dependency has failed for good fails too.
    func startWaitingPlugins() {
        var changed = true
        while changed {
            changed = false
            for id in order {
                guard let record = records[id] else { continue }
                let parked = record.state == .starting && record.instance?.awaitingDependencies == true
                guard record.state == .waiting || parked else { continue }
                let deps = record.dependencyIDs.compactMap { records[$0] }
                if let dead = deps.first(where: { $0.state == .failed || ($0.state == .stopped && !shuttingDown) }) {
                    record.state = .failed
                    record.failedByDependency = true
                    record.problem = "dependency \(dead.identifier) is \(dead.state.rawValue)"
                    logger.error("\(id) will not start: \(record.problem!)")
                    if let instance = record.instance { stopPlugin(record) { _ = instance } }
                    record.settleWaiters(record.problem)
                    changed = true
                    continue
                }
                if record.state == .waiting {
                    spawn(record)
                } else if !shuttingDown, let instance = record.instance, deps.allSatisfy({ $0.state == .running }) {
                    instance.awaitingDependencies = false
                    sendStartup(record, instance)
                }
            }
        }
        checkLaunch()
    }

    /// Once no plugin is waiting or starting for the first time, every running plugin gets `launch`,
    /// and the ready line is printed.
    func checkLaunch() {
        guard !launched, !shuttingDown else { return }
        let busy = records.values.contains { $0.state == .waiting || (($0.state == .starting || $0.state == .restarting) && !$0.hasRun) }
        guard !busy else { return }
        launched = true
        let running = order.compactMap { records[$0] }.filter { $0.state == .running }
        var remaining = running.count
        let announce: () -> Void = { [self] in
            let failed = records.values.filter { $0.state == .failed }.count
            let line = "supervisor ready: \(running.count) plugin\(running.count == 1 ? "" : "s") running"
                + (failed > 0 ? ", \(failed) failed" : "") + ", control socket \(config.socketPath)"
            logger.info("\(line)")
            onReady?(line)
            onReady = nil
        }
        for record in running { refreshResources(record) }
        warmCatalog()
        if remaining == 0 { announce(); return }
        for record in running {
            sendEvent(record, .launch) { _ in
                remaining -= 1
                if remaining == 0 { announce() }
            }
        }
        flushDirty()
    }

    /// Spawns a worker for `record` and wires its socket and output into the event loop.
    func spawn(_ record: PluginRecord) {
        // One worker per plugin, and none once shutdown has begun.
        guard record.instance == nil, !shuttingDown else { return }
        let id = record.identifier
        let library: (path: String, variant: String?)
        do {
            library = try VariantSelector.choose(record.manifest, sandbox: config.sandboxEnabled)
        } catch {
            fail(record, reason: "\(error)")
            return
        }
        record.library = library.path
        record.variant = library.variant
        let data = config.home + "/data/" + id
        let live = config.home + "/live/" + id
        do {
            try FileSystem.makeDirectories(data)
            try FileSystem.makeDirectories(live)
        } catch {
            fail(record, reason: "cannot create the data folder \(data): \(error)")
            return
        }
        let m = record.manifest
        let spec = WorkerSpec(
            identifier: id, version: m.version.description, bundle: m.bundle, library: library.path,
            dataDirectory: data, liveDirectory: live, supervisorPID: getpid(), socketFD: 3,
            maxFrameBytes: config.maxFrameBytes,
            sandbox: SandboxSpec(enabled: config.sandboxEnabled, memoryMB: m.limits.memoryMB, openFiles: m.limits.openFiles,
                                 permissions: m.permissions, required: config.requiredSandboxLayers, runtimePaths: runtimePaths))
        let specJSON: String
        do { specJSON = String(decoding: try ProtocolJSON.encode(spec), as: UTF8.self) } catch {
            fail(record, reason: "cannot encode the worker spec: \(error)")
            return
        }
        let spawned: SpawnedChild
        do {
            spawned = try Spawner.spawn(executable: config.workerExecutable, extraEnvironment: ["\(WorkerSpec.environmentVariable)=\(specJSON)"])
        } catch {
            fail(record, reason: "cannot start a worker (\(config.workerExecutable)): \(error)")
            return
        }
        let instance = WorkerInstance(process: spawned.process, identifier: id, now: .now())
        byPID[instance.pid] = instance
        do {
            try watcher?.watch(instance.process) { [self] exit in loop.execute { self.childExited(instance, exit) } }
        } catch {
            logger.error("cannot watch the worker of \(id): \(error)")
        }
        record.instance = instance
        record.state = record.hasRun ? .restarting : .starting
        logger.debug("spawned worker", metadata: ["plugin": "\(id)", "pid": "\(instance.pid)"])

        ClientBootstrap(group: loop)
            .channelOption(ChannelOptions.autoRead, value: true)
            .channelOption(ChannelOptions.writeBufferWaterMark, value: Self.waterMark)
            .channelInitializer { [self] channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(FrameCodec(maxBody: config.maxFrameBytes)))
                    try channel.pipeline.syncOperations.addHandler(WorkerHandler(supervisor: self, instance: instance))
                }
            }
            .withConnectedSocket(spawned.socket.release())
            .whenComplete { [self] result in
                switch result {
                case .success(let channel):
                    if instance.exited { channel.close(promise: nil) } else { instance.channel = channel }
                case .failure(let error):
                    // NIO closes the descriptor once it has made a channel of it.
                    instance.socketClosed = true
                    kill(instance, reason: "spawnError", message: "cannot watch the worker's socket: \(error)")
                }
            }
        OutputCapture.attach(fd: spawned.stdout.release(), stream: "stdout", plugin: id, supervisor: self)
        OutputCapture.attach(fd: spawned.stderr.release(), stream: "stderr", plugin: id, supervisor: self)

        // A worker must say hello in time (its `startup` has a timeout of its own).
        // Weak: an instance that has ended must not live (with its pidfd) until the timeout passes.
        loop.scheduleTask(in: .milliseconds(Int64(config.startupTimeoutMs))) { [self, weak instance] in
            if let instance, record.instance === instance, !instance.helloReceived {
                kill(instance, reason: "startupTimeout", message: "no hello within \(config.startupTimeoutMs) ms")
            }
        }
    }

    /// Marks a plugin as failed without a worker (it could not be spawned at all).
    func fail(_ record: PluginRecord, reason: String) {
        logger.error("\(record.identifier) cannot start: \(reason)")
        record.state = .failed
        record.problem = reason
        record.lastExit = ExitStatus(reason: "spawnError", message: reason)
        record.settleWaiters(reason)
        startWaitingPlugins()
    }

    /// Ends a worker with SIGKILL, recording why.
    func kill(_ instance: WorkerInstance, reason: String, message: String) {
        guard !instance.exited else { return }
        if instance.killReason == nil { instance.killReason = (reason, message) }
        logger.warning("killing worker: \(reason): \(message)", metadata: ["plugin": "\(instance.identifier)", "pid": "\(instance.pid)"])
        instance.process.signal(SIGKILL)
    }

    /// The worker said `hello`: it is sandboxed and its plugin loaded. It gets `startup` now, or once
    /// its dependencies are running.
    func helloReceived(_ instance: WorkerInstance, _ hello: HelloMessage) {
        guard let record = records[instance.identifier], record.instance === instance else { return }
        instance.helloReceived = true
        instance.sandbox = hello.sandbox ?? []
        instance.sandboxMissing = hello.sandboxMissing ?? []
        instance.timings = hello.timings ?? [:]
        instance.timings["helloUs"] = Int((NIODeadline.now() - instance.spawnedAt).nanoseconds / 1000)
        if let started = hello.timings?["startedAtUs"] {
            // The worker's CLOCK_MONOTONIC at its main() against ours at spawn: the exec and load cost.
            instance.timings["spawnUs"] = max(0, started - Int(instance.spawnedAt.uptimeNanoseconds / 1000))
            instance.timings["startedAtUs"] = nil
        }
        for missing in instance.sandboxMissing where warnedMissingLayers.insert(missing).inserted {
            logger.warning("sandbox layer missing on this host: \(missing); workers run without it")
        }
        if record.dependencyIDs.allSatisfy({ records[$0]?.state == .running }) {
            sendStartup(record, instance)
        } else {
            instance.awaitingDependencies = true
        }
    }

    /// `startup`, with what the plugin needs to know about itself.
    func sendStartup(_ record: PluginRecord, _ instance: WorkerInstance) {
        let m = record.manifest
        var payload: [UInt8] = Array(#"{"identifier":"#.utf8) + JSONEscaping.quoted(m.identifier)
        payload += Array(#","version":"#.utf8) + JSONEscaping.quoted(m.version.description)
        payload += Array(#","dataDirectory":"#.utf8) + JSONEscaping.quoted(config.home + "/data/" + m.identifier)
        payload += Array(#","liveDirectory":"#.utf8) + JSONEscaping.quoted(config.home + "/live/" + m.identifier)
        payload += Array(#","bundleDirectory":"#.utf8) + JSONEscaping.quoted(m.bundle)
        payload += Array(#","dependencies":["#.utf8)
        payload += record.dependencyIDs.map { JSONEscaping.quoted($0) }.joined(separator: [UInt8(ascii: ",")])
        payload += Array("]}".utf8)
        sendEvent(record, .startup, payload: payload, timeoutMs: config.startupTimeoutMs) { [self] result in
            guard record.instance === instance else { return }
            switch result {
            case .success:
                becameRunning(record)
            case .failure(let error) where error.code == ErrorCode.timeout.rawValue:
                kill(instance, reason: "startupTimeout", message: "startup not answered within \(config.startupTimeoutMs) ms")
            case .failure(let error):
                kill(instance, reason: "startupFailed", message: "startup failed: \(error)")
            }
        }
        flushDirty()
    }

    func becameRunning(_ record: PluginRecord) {
        let wasRestart = record.hasRun
        if let instance = record.instance {
            instance.timings["startupUs"] = Int((NIODeadline.now() - instance.spawnedAt).nanoseconds / 1000)
        }
        record.state = .running
        record.problem = nil
        record.hasRun = true
        logger.info("\(record.identifier) \(record.manifest.version) is running",
                    metadata: ["plugin": "\(record.identifier)", "pid": "\(record.instance?.pid ?? 0)"])
        record.settleWaiters(nil)
        // Dependents that could not start only because this plugin was down get another go.
        for dependent in records.values where !shuttingDown && dependent.instance == nil && dependent.failedByDependency
            && dependent.dependencyIDs.contains(record.identifier) {
            dependent.failedByDependency = false
            dependent.state = .waiting
            dependent.problem = nil
        }
        if launched {
            // Every other plugin has long started: this one (restarted, or added by a rescan) hears so now.
            sendEvent(record, .launch) { _ in }
            if !wasRestart { refreshResources(record) }
        }
        if wasRestart {
            // A restarted plugin lost its state: its dependents hear of it (or restart too).
            for dependent in order.compactMap({ records[$0] }) where dependent.dependencyIDs.contains(record.identifier) && dependent.state == .running {
                if config.restartDependents, let inst = dependent.instance {
                    kill(inst, reason: "dependencyRestarted", message: "\(record.identifier) restarted (restartDependents)")
                } else {
                    let payload = Array(#"{"identifier":"#.utf8) + JSONEscaping.quoted(record.identifier) + [UInt8(ascii: "}")]
                    sendEvent(dependent, .dependencyRestarted, payload: payload) { _ in }
                }
            }
        }
        startWaitingPlugins()
        flushDirty()
    }

    // MARK: Exits and restarts

    /// The reaper saw the process end. Its last frames (an `exit` notice) may still be unread in the
    /// socket, so the exit is finalized once the socket reaches EOF too (or after a short wait).
    func childExited(_ instance: WorkerInstance, _ exit: ChildExit) {
        if byPID[instance.pid] === instance { byPID[instance.pid] = nil }
        instance.exited = true
        instance.exit = exit
        if instance.socketClosed {
            finalizeExit(instance)
        } else {
            loop.scheduleTask(in: .milliseconds(250)) { [self] in finalizeExit(instance) }
        }
    }

    func finalizeExit(_ instance: WorkerInstance) {
        guard !instance.finalized, let exit = instance.exit else { return }
        instance.finalized = true
        instance.channel?.close(promise: nil)
        failPending(instance, because: "\(instance.identifier) exited")
        let outgoing = instance.outgoing
        instance.outgoing = [:]
        cancelInFlight(outgoing)
        let status = exitStatus(instance, exit)
        let callbacks = instance.onExit
        instance.onExit = []
        guard let record = records[instance.identifier], record.instance === instance else {
            callbacks.forEach { $0() }
            return
        }
        record.instance = nil
        record.lastExit = status
        let meta: Logger.Metadata = ["plugin": "\(record.identifier)", "pid": "\(exit.pid)"]
        let described = Self.describe(status)
        if record.failedByDependency, record.state == .failed {
            logger.info("\(record.identifier) stopped: \(record.problem ?? "a dependency failed")", metadata: meta)
            callbacks.forEach { $0() }
            return
        }
        if instance.stopRequested || shuttingDown {
            record.state = .stopped
            logger.info("\(record.identifier) stopped (\(described))", metadata: meta)
            // Whoever waited for this worker to run hears it stopped, before the stop's own
            // callbacks (a restart, an install) queue waiters for the next one.
            record.settleWaiters("stopped")
            callbacks.forEach { $0() }
            return
        }
        let abnormal = exit.signaled || exit.code != 0 || instance.killReason != nil
        logger.log(level: abnormal ? .error : .notice, "\(record.identifier) exited: \(described)", metadata: meta)
        callbacks.forEach { $0() }
        if record.rollbackOnFailure {
            record.state = .failed
            record.problem = described
            record.settleWaiters(described)
            return
        }
        let policy = record.manifest.restart
        guard policy == .always || (policy == .onFailure && abnormal) else {
            record.state = abnormal ? .failed : .stopped
            record.problem = abnormal ? "exited: \(described) (restart policy \(policy.rawValue))" : nil
            record.settleWaiters(record.problem ?? "exited cleanly")
            startWaitingPlugins()
            return
        }
        scheduleRestart(record, after: described)
    }

    /// Restarts with exponential backoff and jitter (the first at once), within the intensity limit.
    func scheduleRestart(_ record: PluginRecord, after described: String) {
        let now = NIODeadline.now()
        let window = TimeAmount.seconds(Int64(config.restartWindowSeconds))
        record.restartTimes = record.restartTimes.filter { now - $0 < window }
        if record.restartTimes.count >= config.restartLimit {
            record.state = .failed
            record.problem = "restarted \(record.restartTimes.count) times in \(config.restartWindowSeconds) s; stays failed until `supervisor restart \(record.identifier)` (last exit: \(described))"
            logger.error("\(record.identifier) failed: \(record.problem!)", metadata: ["plugin": "\(record.identifier)"])
            record.settleWaiters(record.problem)
            startWaitingPlugins()
            return
        }
        let n = record.restartTimes.count
        var delayMs = 0
        if n > 0 {
            let base = config.restartBackoffBaseMs << min(n - 1, 20)
            delayMs = min(config.restartBackoffMaxMs, Int(Double(base) * Double.random(in: 0.8...1.2)))
        }
        record.restartTimes.append(now)
        record.restarts += 1
        record.state = .restarting
        logger.info("restarting \(record.identifier) in \(delayMs) ms (restart \(record.restarts))", metadata: ["plugin": "\(record.identifier)"])
        let go: @Sendable () -> Void = { [self] in
            record.pendingRestart = nil
            guard record.state == .restarting, record.instance == nil, !shuttingDown else { return }
            if record.dependencyIDs.allSatisfy({ records[$0]?.state == .running }) {
                spawn(record)
            } else {
                record.state = .waiting
                startWaitingPlugins()
            }
        }
        if delayMs == 0 { go() } else {
            record.pendingRestart = loop.scheduleTask(in: .milliseconds(Int64(delayMs))) { go() }
        }
    }

    func exitStatus(_ instance: WorkerInstance, _ exit: ChildExit) -> ExitStatus {
        var status = exit.signaled ? ExitStatus(signal: exit.signalName, reason: "signaled") : ExitStatus(code: exit.code, reason: "exited")
        if let notice = instance.exitNotice, !exit.signaled, Self.exitCode(for: notice.reason) == exit.code {
            status.reason = notice.reason
            status.message = notice.message
            status.syscall = notice.syscall
        } else if let kill = instance.killReason {
            status.reason = kill.reason
            status.message = kill.message
        } else if exit.signaled || exit.code != 0, let record = records[instance.identifier],
                  max(exit.maxRSS, instance.lastData) >= Self.hardLimit(record.manifest) / 10 * 8 {
            // An allocation failed at the RLIMIT_DATA backstop before the sampler saw the hard limit.
            let hard = Self.hardLimit(record.manifest)
            status.reason = "memoryLimit"
            status.message = "ended (\(exit.signaled ? exit.signalName : "exit code \(exit.code)")) at its memory limit: peak resident \(exit.maxRSS >> 20) MiB, limit \(hard >> 20) MiB"
        } else if exit.signaled, exit.code == SIGSYS {
            // The seccomp trap fired where the reporter could not run (SIGSYS blocked or replaced).
            status.reason = "sandboxViolation"
            status.message = "killed by SIGSYS: a system call the sandbox forbids"
        } else if instance.stopRequested {
            status.reason = "stopped"
        }
        return status
    }

    /// The exit code a worker uses when it ends itself for `reason` (PluginWorker's WorkerError and
    /// the SIGSYS reporter). A notice whose exit code does not match is not believed: a plugin can
    /// write anything to its socket, but cannot fake how its process ended.
    static func exitCode(for reason: String) -> Int32? {
        switch reason {
        case "sandboxViolation": return 159
        case "loadError", "missingSymbol", "abiMismatch", "createFailed": return 78
        case "sandboxError": return 71
        case "orphaned": return 65
        case "badSpec": return 64
        case "terminated": return 0
        default: return nil
        }
    }

    static func describe(_ s: ExitStatus) -> String {
        var parts: [String] = []
        if let c = s.code { parts.append("exit code \(c)") }
        if let sig = s.signal { parts.append("signal \(sig)") }
        if s.reason != "exited" && s.reason != "signaled" { parts.append(s.reason) }
        if let sc = s.syscall { parts.append("syscall \(sc)") }
        if let m = s.message { parts.append(m) }
        return parts.joined(separator: ", ")
    }

    /// Fails every request in flight to `instance` with `unavailable`.
    func failPending(_ instance: WorkerInstance, because reason: String) {
        let pending = instance.pending
        instance.pending = [:]
        for (_, request) in pending.sorted(by: { $0.key < $1.key }) {
            answer(request.origin, error: ErrorBody(.unavailable, "\(reason) before answering \(request.what)"))
        }
        flushDirty()
    }

    func workerDisconnected(_ instance: WorkerInstance) {
        instance.channel = nil
        instance.socketClosed = true
        failPending(instance, because: "\(instance.identifier) closed its connection")
        if instance.exited { return finalizeExit(instance) }
        // A worker that closed its socket is on its way out (its own SIGTERM, a crash); one that
        // lingers without a socket is useless, so it gets a moment to exit and is then killed.
        guard !instance.exited, !instance.stopRequested else { return }
        loop.scheduleTask(in: .milliseconds(500)) { [self, weak instance] in
            if let instance, !instance.exited {
                kill(instance, reason: "disconnected", message: "the worker closed its protocol socket but did not exit")
            }
        }
    }

    // MARK: Timers

    func startTimers() {
        // Call and event deadlines, checked every 10 ms.
        timers.append(loop.scheduleRepeatedTask(initialDelay: .milliseconds(10), delay: .milliseconds(10)) { [self] _ in
            expireRequests()
        })
        // Memory: soft limit → memoryWarning, hard limit → memoryLimit.
        timers.append(loop.scheduleRepeatedTask(initialDelay: .milliseconds(250), delay: .milliseconds(250)) { [self] _ in
            checkMemory()
        })
        // Daily live resources: checked hourly, each refreshed when a day old.
        timers.append(loop.scheduleRepeatedTask(initialDelay: .hours(1), delay: .hours(1)) { [self] _ in
            for record in records.values where record.state == .running && record.manifest.resources?.daily == true {
                refreshResources(record)
            }
        })
        // Watchdog pings.
        timers.append(loop.scheduleRepeatedTask(initialDelay: .milliseconds(Int64(config.pingIntervalMs)),
                                                delay: .milliseconds(Int64(config.pingIntervalMs))) { [self] _ in
            watchdog()
        })
    }

    func expireRequests() {
        let now = NIODeadline.now()
        for record in records.values {
            guard let instance = record.instance, !instance.pending.isEmpty else { continue }
            var expired: [UInt64] = []
            for (id, request) in instance.pending where request.deadline <= now { expired.append(id) }
            for id in expired.sorted() {
                guard let request = instance.pending.removeValue(forKey: id) else { continue }
                answer(request.origin, error: ErrorBody(.timeout, "\(record.identifier) did not answer \(request.what) in time"))
                if let channel = instance.channel {
                    var cancel = FrameBuilder(kind: .cancel)
                    cancel.uint("id", id)
                    write(cancel.finish(), to: channel)
                }
            }
        }
        flushDirty()
    }

    func watchdog() {
        let now = NIODeadline.now()
        for record in records.values where record.state == .running {
            guard let instance = record.instance, let channel = instance.channel else { continue }
            if let ping = instance.outstandingPing {
                if now - ping.sentAt > .milliseconds(Int64(config.pingTimeoutMs)) {
                    kill(instance, reason: "watchdog", message: "no pong within \(config.pingTimeoutMs) ms")
                }
                continue
            }
            let id = instance.nextID
            instance.nextID += 1
            instance.outstandingPing = (id, now)
            var ping = FrameBuilder(kind: .ping)
            ping.uint("id", id)
            write(ping.finish(), to: channel)
        }
        flushDirty()
    }

    // MARK: Memory

    static let pageSize = Int(sysconf(Int32(_SC_PAGESIZE)))

    /// The hard limit (bytes): the manifest's `limits.memoryMB`, else 1 GiB; the worker's RLIMIT_DATA too.
    static func hardLimit(_ m: Manifest) -> Int { (m.limits.memoryMB ?? 1024) << 20 }
    /// The soft limit: `limits.softMemoryMB`, else three quarters of the hard limit.
    static func softLimit(_ m: Manifest) -> Int { m.limits.softMemoryMB.map { $0 << 20 } ?? hardLimit(m) / 4 * 3 }

    /// Samples every worker's resident and data size (/proc/<pid>/statm). Over the soft limit a
    /// plugin gets `memoryWarning` (once per excursion); over the hard limit it is killed (`memoryLimit`).
    func checkMemory() {
        for record in records.values where record.state == .running || record.state == .starting || record.state == .restarting {
            guard let instance = record.instance, !instance.exited,
                  let statm = try? FileSystem.readFile("/proc/\(instance.pid)/statm", limit: 256) else { continue }
            let fields = String(decoding: statm, as: UTF8.self).split(separator: " ")
            guard fields.count >= 6, let rssPages = Int(fields[1]), let dataPages = Int(fields[5]) else { continue }
            instance.lastRSS = rssPages * Self.pageSize
            instance.lastData = dataPages * Self.pageSize
            let hard = Self.hardLimit(record.manifest), soft = Self.softLimit(record.manifest)
            if instance.lastRSS >= hard {
                kill(instance, reason: "memoryLimit", message: "resident memory \(instance.lastRSS >> 20) MiB is over the limit of \(hard >> 20) MiB")
            } else if instance.lastRSS >= soft, !instance.memoryWarned, record.state == .running {
                instance.memoryWarned = true
                logger.warning("\(record.identifier) uses \(instance.lastRSS >> 20) MiB, over its soft limit of \(soft >> 20) MiB: sending memoryWarning",
                               metadata: ["plugin": "\(record.identifier)"])
                sendEvent(record, .memoryWarning) { _ in }
            } else if instance.lastRSS < soft / 10 * 9 {
                instance.memoryWarned = false
            }
        }
        flushDirty()
    }

    // MARK: Writing

    /// Outbound buffering per channel before it counts as not writable (back-pressure).
    static let waterMark = ChannelOptions.Types.WriteBufferWaterMark(low: 256 * 1024, high: 4 * 1024 * 1024)

    func write(_ frame: [UInt8], to channel: Channel) {
        var buffer = channel.allocator.buffer(capacity: frame.count)
        buffer.writeBytes(frame)
        channel.write(buffer, promise: nil)
        dirty[ObjectIdentifier(channel)] = channel
    }

    func flushDirty() {
        guard !dirty.isEmpty else { return }
        for channel in dirty.values { channel.flush() }
        dirty.removeAll(keepingCapacity: true)
    }
}

/// Errors that stop the supervisor from starting.
public enum SupervisorError: Error, CustomStringConvertible {
    case home(String, String)
    case alreadyRunning(home: String, pid: String)
    case controlSocket(String, String)

    public var description: String {
        switch self {
        case .home(let home, let why): return "cannot use the home folder \(home): \(why)"
        case .alreadyRunning(let home, let pid):
            return "another supervisor (pid \(pid)) is already running with home \(home); stop it with `supervisor stop`, or give this one another --home"
        case .controlSocket(let path, let why): return "cannot listen on the control socket \(path): \(why)"
        }
    }
}
