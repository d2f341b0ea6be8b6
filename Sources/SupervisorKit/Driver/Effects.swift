import Bundles
import NIOCore
import PluginProtocol
import SupervisorCore

/// What one component asks of another, and what a plugin's life decided. Components post effects;
/// the engine, the one driver, carries them out (Driver/CarryOut.swift) after the work of the
/// current input is done, in the order they were posted (a life's actions at once: `Effects.now`).
/// So no component holds another, and every way one part of the supervisor acts on another is a
/// case here.
enum Effect {
    // MARK: For the lifecycle (Lifecycle/*.swift)

    /// What a plugin's life decided (`PluginLife.Action`), carried out at once, in order
    /// (Driver/CarryOutLife.swift); `exited` is the worker's end the actions are about, if any.
    case life(PluginRecord, [PluginLife.Action], exited: Lifecycle.Exited? = nil)

    /// A worker said something it may not: it is killed (its exit then says `protocolViolation`).
    case protocolViolation(WorkerInstance, String)
    /// A worker's `hello` arrived.
    case hello(WorkerInstance, HelloMessage)
    /// A worker said it is ending (`exit`): its immediate restart may be prepared now.
    case ending(WorkerInstance)
    /// A worker draining for its stop has no call inside any more.
    case drained(WorkerInstance)
    /// Ends a worker with SIGKILL, recording why.
    case kill(WorkerInstance, ExitReason, String)
    /// A plugin was forgotten: a reload waiting for it may be settled.
    case settleReloads
    /// Plugins waiting to start (a new one installed) may start.
    case startWaitingPlugins
    /// Starts a stopped plugin from a clean slate; `done` hears nil once it runs, or why not.
    /// `counted`: a restart (`PluginLife.startRequested`).
    case startAgain(PluginRecord, counted: Bool = true, trigger: String = "restart", done: (String?) -> Void)
    /// Starts `manifest` beside the running version of `record` (an update with zero drops).
    case startBeside(PluginRecord, Manifest, done: (String?) -> Void)
    /// Stops a plugin's worker (drained first); `then` runs once it has ended.
    case stopPlugin(PluginRecord, then: () -> Void)
    /// `supervisor restart`, asked by another component.
    case restart(String, done: (String?) -> Void)
    /// A kept standby for a running plugin, if one may be made now (`standbyWorkers: "always"`;
    /// the engine holds it back while an upgrade quiets or hands over: nothing is spawned then).
    case keepStandby(PluginRecord)
    /// A plugin's phase changes outside its life's inputs (an uninstall stops it for good).
    case move(PluginRecord, PluginPhase)
    /// Something needs an `inactive` plugin (SPEC §16): `by` says what.
    case activate(PluginRecord, by: String)
    /// A plugin idle for its `idleStopMs` is stopped (its `idleStopping` set): `inactive` after.
    case stopIdle(PluginRecord)

    // MARK: For routing (Routing/*.swift)

    /// A worker's peer links are given back (it ended).
    case forgetLinks(WorkerInstance)
    /// The workers that call `callee` over peer links are told to unlink (it is stopping).
    case unlinkCallers(of: WorkerInstance)
    /// The requests waiting for a plugin go to its worker, now running.
    case forwardWaiting(PluginRecord)
    /// A plugin leaves the table: what waits for it fails with `reason`.
    case forget(PluginRecord, because: String)
    /// A request held while its plugin was installed on demand, or an event (`send`) that waited
    /// for its plugin, sent now (its frame as the client wrote it).
    case replay(MessageKind, target: String, frame: [UInt8], origin: ReplyOrigin)

    // MARK: For installs (Installs/*.swift)

    /// A plugin's live resources are fetched when due (or now, `force`).
    case refreshResources(PluginRecord, force: Bool = false)
    /// The catalog is fetched in the background, for on-demand installs.
    case warmCatalog
    /// Every plugin has started: updates a stop interrupted are applied again.
    case resumeUpdates
    /// A plugin crashed within its update's grace: the previous version is put back, if it can be;
    /// `then` hears whether it was.
    case rollBack(PluginRecord, crash: String, then: (Bool) -> Void)

    // MARK: For the host's methods (Host/HostMethods.swift)

    /// A worker ended: the host method calls it made are dropped.
    case hostCallerEnded(WorkerInstance)

    // MARK: For the engine

    /// A spawned worker's protocol socket is wired into the event loop (Routing/WorkerChannel.swift).
    case connect(WorkerInstance, socket: Int32)
    /// The supervisor's timers start (once plugins start) or stop (once every worker has ended).
    case startTimers
    case stopTimers
    /// The last worker has ended: the control socket closes, then `then` runs.
    case closeControlSocket(then: () -> Void)
}

/// The effects posted and not yet carried out. The first post of a turn schedules the one run of
/// the turn, after the input that posted it (as the outbox's first write schedules its flush);
/// what is posted while effects are carried out joins the same run.
final class Effects {
    private let loop: EventLoop
    private var queue: [Effect] = []
    private var scheduled = false
    /// Carries out one effect: set by the engine once its components exist.
    var carryOut: (Effect) -> Void = { _ in preconditionFailure("effects posted before the engine was made") }

    init(loop: EventLoop) {
        self.loop = loop
    }

    /// Carries out `effect` now, before the rest of the current input: for what the caller reads
    /// back at once (a plugin's life moved, a worker spawned).
    func now(_ effect: Effect) {
        carryOut(effect)
    }

    func post(_ effect: Effect) {
        queue.append(effect)
        guard !scheduled else { return }
        scheduled = true
        loop.assumeIsolated().execute { self.run() }
    }

    /// Carries out what was posted, in order, including what is posted meanwhile.
    func run() {
        var next = 0
        while next < queue.count {
            let effect = queue[next]
            next += 1
            carryOut(effect)
        }
        queue.removeAll(keepingCapacity: true)
        scheduled = false
    }
}
