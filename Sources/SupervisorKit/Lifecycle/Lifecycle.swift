import Bundles
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import LinuxSupport
import Logging
import NIOCore
import PluginProtocol
import SupervisorCore

/// Brings plugins up in dependency order, restarts them by policy, and stops them (Lifecycle/*.swift:
/// starting here, spawning and start-up in Spawning.swift, exits and restarts in Exits.swift,
/// stopping and shutdown in Stopping.swift, SIGHUP in Rescan.swift).
final class Lifecycle: SupervisorComponent {
    let shared: Shared

    /// The supervisor as a whole (kept in `Shared`, where every component reads it).
    var phase: SupervisorPhase {
        get { shared.phase }
        set { shared.phase = newValue }
    }
    /// Succeeds once shutdown is complete.
    let finished: EventLoopPromise<Void>
    private var onReady: ((String) -> Void)?
    let restartPolicy: RestartPolicy
    /// Workers spawned so far: names each worker's cgroup (a new one per spawn).
    var spawnCount = 0
    /// Names the temporary folder of a worker that runs beside another of its plugin's.
    var folderSerial = 0
    /// The workers' seccomp programs, by `network` permission, compiled once (Spawning.swift).
    var seccompPrograms: [Bool: Data?] = [:]
    /// The fork server workers are forked from (`workerStart: "fork-server"`; WorkerStart.swift):
    /// none, launching, ready, or given up for exec with the reason `status` shows.
    var forkServer = ForkServerState<ForkServerConnection>()
    /// Reloads waiting for what they started, stopped and restarted to settle (Rescan.swift).
    var reloads = ReloadWaits<ReloadUnderWay>()
    /// Activations spawned in this turn of the loop, and those waiting for the next (SpawnPacing.swift).
    var spawnPace = SpawnPace()
    /// Runs the next turn of `spawnPace` after the loop's next poll.
    lazy var paceTurns = AfterPoll(loop: loop, logger: logger) { [weak self] in self?.paceTurn() }
    /// The shutdown's stops as they go: which plugins may stop as each one ends (Stopping.swift).
    var shutdownOrder: StopOrder.Progress?
    /// Whether `startWaitingPlugins` is running, and was asked again from within.
    private var startPass = StartPass.idle

    init(_ shared: Shared) {
        self.shared = shared
        finished = shared.loop.makePromise()
        let c = shared.config
        restartPolicy = RestartPolicy(limit: c.restartLimit, windowSeconds: c.restartWindowSeconds,
                                      backoffBaseMs: c.restartBackoffBaseMs, backoffMaxMs: c.restartBackoffMaxMs)
    }

    func startShutdownPhase() -> Bool {
        guard !isShuttingDown else { return false }
        phase = .shuttingDown
        // No worker starts from here on.
        forkServer.shutdown()?.stop()
        return true
    }

    /// The last worker has ended; false if that was already said.
    func endShutdownPhase() -> Bool {
        guard phase == .shuttingDown else { return false }
        phase = .finished
        return true
    }

    // MARK: Starting

    /// Reads the plugin folders into the table, before the control socket takes requests: a
    /// request that arrives at once finds every plugin (waiting to start), never "not installed".
    func loadPlugins() {
        loop.preconditionInEventLoop()
        let catalog = PluginCatalog(directories: config.pluginDirectories)
        table.catalog = catalog
        for problem in catalog.problems { logger.error("\(problem)") }
        for id in catalog.order {
            for note in catalog.all[id]!.notes { logger.warning("\(note)", metadata: ["plugin": "\(id)"]) }
            // An `onCall` plugin begins `inactive`: no worker until something needs it (SPEC §16).
            let record = PluginRecord(manifest: catalog.all[id]!, phase: config.initialPhase(of: catalog.all[id]!))
            if let reason = catalog.unstartable[id] {
                move(record, to: .failed(byDependency: false))
                record.problem = reason
                logger.error("\(reason); \(id) will not start")
            }
            table.add(record)
        }
        let found = catalog.order.count
        logger.info("found \(found) plugin\(found == 1 ? "" : "s") in \(config.pluginDirectories.joined(separator: ", "))")
        // Descriptors for every plugin's worker, asked before any starts (SPEC §16 at scale). The
        // process's limit is the supervisor's to raise when the process is its own (it takes the
        // signals); an embedded host only says what its program's limit allows.
        let budget = DescriptorBudget(plugins: found, peerLinks: config.peerLinks ? catalog.all.values.reduce(0) { $0 + $1.dependencies.count } : 0)
        let limit = ProcessControl.openFilesLimit(raisingTo: config.handlesSignals ? budget.needed : 0)
        if let shortfall = budget.shortfall(limit: limit.soft, hard: limit.hard) { logger.warning("\(shortfall)") }
        for id in config.debugPlugins.sorted() {
            if table[id] == nil {
                logger.warning("--debug \(id): no such plugin was found")
            } else {
                logger.notice("\(id) runs in debug mode: no watchdog, no call or startup timeout, and its worker can be attached to (gdb -p <pid>, pid in `supervisor status`)",
                              metadata: ["plugin": "\(id)"])
            }
        }
    }

    /// Something needs an `inactive` plugin (SPEC §16): its life decides (`PluginLife.activate`).
    func activate(_ record: PluginRecord, by trigger: String) {
        effects.now(.life(record, record.life.activate(record.identifier, by: trigger, dependenciesRunning: table.dependenciesRunning(record))))
    }

    /// Starts what `loadPlugins` found.
    func startAll(onReady: @escaping (String) -> Void) {
        loop.preconditionInEventLoop()
        self.onReady = onReady
        effects.post(.startTimers)
        startWaitingPlugins()
    }

    /// Brings waiting plugins up. Workers are spawned at once, all in parallel (exec, sandbox, dlopen
    /// and hello cost the same whatever the order); a plugin gets `startup` only once every
    /// dependency is running. One whose dependency has failed for good fails too.
    func startWaitingPlugins() {
        loop.preconditionInEventLoop()
        // Asked from within a pass (a spawn that failed at once fails the plugin, and that asks
        // for its dependents), the pass under way goes round once more instead of a pass nested in
        // it: nested, it would take one stack level a plugin, and 1,000 plugins whose workers cannot
        // be spawned (no worker binary, no descriptor left) would overflow the event loop's stack.
        guard startPass == .idle else { return startPass = .askedAgain }
        startPass = .running
        var changed = true
        while changed {
            changed = false
            if startPass == .askedAgain { startPass = .running }
            for record in table.inOrder {
                switch startStep(record) {
                case .failByDependency(let dependency, let phase)?:
                    effects.now(.life(record, record.life.dependencyFailed(record.identifier, dependency: dependency, dependencyPhase: phase,
                                                          hasWorker: record.instance != nil)))
                    changed = true
                case .spawn?:
                    spawn(record)
                case .activate(let dependency)?:
                    // An inactive dependency comes up for this dependent (SPEC §16).
                    if let needed = table[dependency] { activate(needed, by: "dependent \(record.identifier)") }
                    changed = true
                case .startup?:
                    if let instance = record.instance { sendStartup(record, instance) }
                case nil:
                    break
                }
            }
            if startPass == .askedAgain { changed = true }
        }
        startPass = .idle
        checkLaunch()
    }

    private enum StartPass { case idle, running, askedAgain }

    /// What the start order says to do with `record` now (StartOrder.step).
    func startStep(_ record: PluginRecord) -> StartOrder.Step? {
        StartOrder.step(for: record.startFacts, dependencies: record.dependencyIDs.compactMap { table[$0]?.startFacts }, shuttingDown: isShuttingDown)
    }

    /// Once every plugin's first start has settled (running, failed, or ended once and now
    /// restarting, or waiting for a dependency whose first start did not make it), every running
    /// plugin gets `launch`, and the ready line is printed: a plugin that never answers `startup`
    /// holds it for one startup timeout, not for all its restarts.
    func checkLaunch() {
        guard phase == .starting else { return }
        guard table.all.allSatisfy({ StartOrder.firstStartSettled($0.startFacts, lookup: { self.table[$0]?.startFacts }) }) else { return }
        phase = .launched
        let running = table.inOrder.filter { $0.phase == .running }
        var remaining = running.count
        let announce: () -> Void = { [self] in
            let failed = table.all.filter { $0.phase.isFailed }.count
            let inactive = table.all.filter { $0.phase == .inactive }.count
            let line = "supervisor ready: \(running.count) plugin\(running.count == 1 ? "" : "s") running"
                + (inactive > 0 ? ", \(inactive) inactive until called" : "")
                + (failed > 0 ? ", \(failed) failed" : "") + ", control socket \(config.socketPath)"
            logger.info("\(line)")
            onReady?(line)
            onReady = nil
            // After the line is out: whoever reads either sees the same moment.
            shared.systemd.ready()
            // Only now, so that they do not slow the first start (`standbyWorkers: "always"`).
            keepStandbys()
        }
        for record in running { effects.post(.refreshResources(record)) }
        effects.post(.warmCatalog)
        effects.post(.resumeUpdates)
        if remaining == 0 { announce(); return }
        for record in running {
            shared.sendEvent(record, .launch) { _ in
                remaining -= 1
                if remaining == 0 { announce() }
            }
        }
    }

    // MARK: Starting again on request

    /// Starts a stopped plugin from a clean slate (restart history and failure cleared): now, or once
    /// its dependencies run. `done` hears nil when it runs, or why it did not start.
    /// `counted`, `trigger`: as `PluginLife.startRequested` says.
    func startAgain(_ record: PluginRecord, counted: Bool = true, trigger: String = "restart", _ done: @escaping (String?) -> Void) {
        guard !isShuttingDown else { return done("the supervisor is shutting down") }
        record.startWaiters.append(done)
        effects.now(.life(record, record.life.startRequested(dependenciesRunning: table.dependenciesRunning(record), hasWorker: record.instance != nil,
                                                             counted: counted, trigger: trigger)))
    }

    /// `supervisor restart <id>`: stop it if running, clear its failure and restart history, start it.
    func restartCommand(_ id: String, _ done: @escaping (String?) -> Void) {
        guard let record = table[id] else { return done("no plugin \(id) is installed") }
        if let conflict = record.removalConflict { return done(conflict) }
        if let problem = table.catalog.unstartable[id] { return done(problem) }
        guard !isShuttingDown else { return done("the supervisor is shutting down") }
        // A restart that was scheduled was counted when it was: this one takes its place.
        let counted = !record.cancelRestart()
        if record.instance != nil {
            stopPlugin(record) { [self] in
                // Removed while it stopped (an uninstall, a rescan): nothing to start again.
                guard table[id] === record else { return done("\(id) was removed") }
                startAgain(record, counted: counted, done)
            }
        } else {
            startAgain(record, counted: counted, done)
        }
    }
}
