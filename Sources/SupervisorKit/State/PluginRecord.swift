#if canImport(Glibc)
import Glibc
#endif
import Bundles
import LinuxSupport
import Logging
import NIOCore
import PluginProtocol
import Protocol
import SupervisorCore

/// Everything the supervisor knows of one plugin, across its worker restarts.
/// Owned by the supervisor's event loop, like every object in State/: created, read and changed only
/// there (not `Sendable`: the compiler keeps it there).
final class PluginRecord {
    /// The version that serves calls (the new one's once an update switched to it).
    var manifest: Manifest
    /// Its phase, restarts and problems, and the rules for its workers' ends (State/PluginLife.swift).
    var life: PluginLife
    /// The worker that serves calls (or is coming up to).
    var instance: WorkerInstance?
    /// What comes after the worker that serves, if anything (at most one at a time).
    var next = NextWorker.none
    /// Workers of a previous version finishing their calls after an update switched to a new one;
    /// each leaves once reaped.
    var retiring: [WorkerInstance] = []
    /// The library chosen for this host, and the variant's name when `variants` chose it.
    var library: String?
    var variant: String?
    /// Callers waiting for it to be running (restart command, install); called with nil or why it failed.
    var startWaiters: [(String?) -> Void] = []
    /// Calls its sandbox refused, by syscall name, over the plugin's life (SPEC §5): each denial
    /// (EPERM) and each violation.
    var sandboxDenials: [String: Int] = [:]
    /// Its `plugin_calls_total` and duration handles, looked up on its first call.
    var callMetrics: CallMetrics?
    /// Requests that wait for it to run (Routing/Queueing.swift), oldest first.
    var waiting = WaitQueue<QueuedRequest>()
    /// Where its update is (starting, or the previous version kept for the grace period), with its
    /// files (Installs/UpdateGrace.swift), and the timer that ends the grace.
    var update = UpdateStage<UpdateFiles>.none
    var graceTimer: Scheduled<Void>?
    /// When a call, a stream or a link's calls last passed to it (SPEC §16: `idleStopMs`).
    var lastTraffic = NIODeadline.now()
    /// Why its bundle on disk could not start when a rescan last read it, while a worker of what it
    /// loaded runs on (`RescanPlan.Step.keep`): `status` shows it until a rescan finds it fixed.
    var bundleProblem: String?
    /// Its worker is being stopped for having been idle this long (ms): its end makes it `inactive`.
    var idleStopping: Int?
    /// An update (or its rollback) started it from `inactive`, only to prove the version loads.
    var startedForUpdate = false
    /// Its bundle has left the plugins folder for an uninstall that stops it: a rescan leaves it
    /// to that, and a second uninstall is refused.
    var uninstalling = false
    /// A rescan found its bundle gone and stops it, to forget it once stopped
    /// (Lifecycle/Stopping.swift, `stopRemoved`).
    var removal: Removal?

    init(manifest: Manifest, phase: PluginPhase) {
        self.manifest = manifest
        self.life = PluginLife(phase: phase)
    }

    var phase: PluginPhase { life.phase }
    var restarts: Int { life.restarts }
    var restartHistory: [Instant] { life.restartHistory }
    var lastExit: ExitStatus? { life.lastExit }
    var problem: String? {
        get { life.problem }
        set { life.problem = newValue }
    }
    var lastError: String? {
        get { life.lastError }
        set { life.lastError = newValue }
    }
    var installAwaitsVerdict: Bool {
        get { life.installAwaitsVerdict }
        set { life.installAwaitsVerdict = newValue }
    }
    var hasRun: Bool {
        get { life.hasRun }
        set { life.hasRun = newValue }
    }

    /// During an update: the new version's worker coming up beside `instance`.
    var successor: Successor? { if case .successor(let s) = next { s } else { nil } }
    /// A crashed worker's replacement waiting to be taken for the restart.
    var standby: Standby? { if case .standby(let s) = next { s } else { nil } }

    /// A restart waiting for its delay is called off.
    /// Whether one was scheduled (it was counted in `restarts` then).
    @discardableResult
    func cancelRestart() -> Bool {
        guard case .restart(let timer, _) = next else { return false }
        timer.cancel()
        next = .none
        return true
    }

    var identifier: String { manifest.identifier }

    /// The plugin as the core's start rules read it (`StartOrder`).
    var startFacts: StartOrder.Plugin {
        StartOrder.Plugin(identifier: identifier, phase: phase, dependencies: dependencyIDs, parked: instance?.phase == .loaded,
                          hasWorker: instance != nil, hasRun: hasRun, hasExited: lastExit != nil, activating: life.activating)
    }

    /// The plugin as the core's routing rule reads it (`Route`).
    var routeTarget: Route.Target {
        Route.Target(identifier: identifier, phase: phase, problem: problem, worker: instance.map {
            Route.Worker(stopRequested: $0.phase.stopRequested, connected: $0.channel != nil, mayHaveEnded: $0.mayHaveEnded,
                         writable: $0.channel?.isWritable ?? false, awaitsItsPageAsk: $0.waitsForItsPageAsk)
        })
    }
    var dependencyIDs: [String] { manifest.dependencies.map(\.identifier) }

    /// Which of its workers `instance` is, or nil for one it no longer has.
    func role(of instance: WorkerInstance) -> WorkerRole? {
        if self.instance === instance { return .current }
        if successor?.instance === instance { return .successor }
        if retiring.contains(where: { $0 === instance }) { return .retiring }
        if standby?.instance === instance { return .standby }
        return nil
    }

    /// Its live workers: the current one, a new version coming up beside it, old ones draining.
    var workers: [WorkerInstance] {
        var all = retiring
        if let instance { all.append(instance) }
        if let next = successor?.instance { all.append(next) }
        if let waiting = standby?.instance { all.append(waiting) }
        return all
    }

    /// Moves to `next` if PluginPhase allows it.
    @discardableResult
    func move(to next: PluginPhase, logger: Logger) -> Bool {
        guard life.move(to: next) else {
            refused(phase, next, of: identifier, logger: logger)
            return false
        }
        return true
    }

    /// Tells everyone waiting for this plugin to run how it went.
    func settleWaiters(_ problem: String?) {
        let waiters = startWaiters
        startWaiters = []
        for w in waiters { w(problem) }
    }
}

/// The one place a phase changes: a move the table does not allow is a bug, which stops a debug
/// build and is refused (and logged) in a release build.
private func transition<P: Phase>(_ phase: inout P, to next: P, of what: String, logger: Logger) -> Bool {
    guard P.allows(from: phase, to: next) else {
        refused(phase, next, of: what, logger: logger)
        return false
    }
    phase = next
    return true
}

private func refused<P: Phase>(_ phase: P, _ next: P, of what: String, logger: Logger) {
    logger.error("internal error: \(what) cannot go from \(phase) to \(next); refused")
    assertionFailure("illegal phase change \(phase) → \(next) for \(what)")
}

/// What comes after a plugin's serving worker. One at a time: a standby is spawned only when no
/// update is under way and is taken or discarded when the crashed worker's exit is recorded; a
/// restart is scheduled only once that exit is recorded (the standby is gone by then); an update
/// starts beside a worker only when nothing else is next.
enum NextWorker {
    case none
    /// An update's new version coming up beside the serving worker (Lifecycle/Successor.swift).
    case successor(Successor)
    /// After the serving worker crashed: the next one, spawned before the crashed one was reaped and
    /// waiting sandboxed, before its plugin loads, to be taken for the restart or discarded
    /// (Lifecycle/Standby.swift).
    case standby(Standby)
    /// A restart waiting for its backoff delay (Lifecycle/Exits.swift), due then.
    case restart(Scheduled<Void>, due: NIODeadline)

    var isNone: Bool { if case .none = self { true } else { false } }
}

/// What a worker is to its plugin.
enum WorkerRole {
    /// It serves the plugin's calls (or is coming up to).
    case current
    /// A new version coming up beside the current worker during an update.
    case successor
    /// A previous version finishing its calls after an update switched away from it.
    case retiring
    /// Spawned for a restart before the crashed worker was reaped; its plugin is not loaded yet.
    case standby
}

/// One worker process for a plugin, from spawn to its exit being recorded. Owned by the event loop.
final class WorkerInstance {
    let process: ChildProcess
    let identifier: String
    /// The version it runs (during an update, the old and the new worker's differ).
    let manifest: Manifest
    /// Its private temporary folder (TMPDIR), emptied when it ends.
    let temporaryFolder: String
    let spawnedAt: NIODeadline
    private(set) var phase: WorkerPhase = .spawned
    /// It answered `startup` (an exit before that is a failed start).
    private(set) var everRan = false
    var connection = WorkerConnection.connecting
    /// What it said in `hello` (nil until then).
    var hello: HelloFacts?
    /// Requests sent to it and not yet answered, by the id this supervisor gave them.
    var pending = CallTable<PendingRequest>()
    /// Requests this plugin made that are being served elsewhere: its id → (the callee, the callee's
    /// id), within the limits one plugin has (`OutgoingCalls`). Cancelled at the callee if this
    /// worker dies first.
    var outgoing = OutgoingCalls<WorkerInstance>()
    /// Bytes of input chunks the supervisor holds for this worker's streams until their readers
    /// grant room (`InputHolder`; at most `heldBytesLimit`).
    var heldInputBytes = 0
    /// It was last refused a call for its limits at this time (said in the log once a minute).
    var lastRefusedForLimits: NIODeadline?
    /// What the supervisor waits for from it (its start, or a pong), with the deadline.
    private(set) var awaiting = Awaited.nothing
    /// Set when the worker said why it is ending itself.
    var exitNotice: ExitNotice?
    /// Closed at its first protocol violation: nothing it sends after that is acted on.
    var gate = FrameGate()
    /// Its requests while its socket stays full (it does not read its answers).
    var unread = UnreadAnswers()
    /// Its replies to requests already answered or given up on (dropped; a flood of them ends it).
    var lateReplies = RateWindow(limit: .max, floodLimit: Router.lateRepliesPerSecond)
    /// Set when the supervisor killed it, with why.
    var killReason: (reason: ExitReason, message: String)?
    /// The forbidden syscall its filter handed over, for which the notifier killed it.
    var violation: String?
    /// Its control group, removed once it has been reaped; and memory.events' `high` when last read.
    var cgroup: CgroupGroup?
    var memoryHighEvents = 0
    /// Called once its exit has been recorded (stops, restarts and installs wait on it).
    var onExit: [() -> Void] = []
    /// Last memory sample and whether `memoryWarning` was sent for the current excursion.
    var memory = MemorySample()
    /// Its `log` messages, rate-limited.
    var logWindow = RateWindow.logs(floodLimit: SupervisorConfig.defaultFloodLogsPerSecond)
    /// Start-up timings for `status`.
    var timings: [String: Int] = [:]
    /// Forked by the fork server (else exec'd).
    var forked = false
    /// Why it was exec'd although the fork server was asked for (`status`: `workerStartProblem`).
    var startProblem: String?
    /// Its CPU time (µs) already added to `plugin_cpu_seconds_total`.
    var cpuCounted: Int64 = 0
    /// The library it loads and how that file looked at spawn (a crash after it changed in place
    /// is `libraryReplaced`).
    var library: (path: String, stamp: FileStamp?)?
    /// The supervisor's end of its descriptor channel (descriptor 4), kept for peer links
    /// (PeerLinks.swift); closed when it ends. Nil: no links for it.
    var descriptorChannel: Int32?
    /// The supervisor's end of the worker's payload channel (its descriptor 5): the sealed memfds
    /// of the bytes attached to messages, both ways (Routing/Payloads.swift); closed when the
    /// instance goes. Nil: the channel failed to be made or is closed.
    var payloadChannel: Int32?
    /// Peer links from it, by callee identifier, and to it (docs/protocol.md "Peer links").
    var linksOut: [String: PeerLink] = [:]
    var linksIn: [ObjectIdentifier: PeerLink] = [:]
    /// A link to it ended by itself (its caller said so): it may have ended before the supervisor
    /// read its socket's end. Until its exit is seen or a check finds it alive
    /// (`Router.linkEndedByItself`), a request for it waits in its queue (`Router.mustWait`), so one
    /// made at that moment waits for the restart instead of going to a worker that is ending.
    var mayHaveEnded = false
    /// Which of the calls it holds its plugin may have started, for its end (SPEC §15).
    var crash = CrashWitness()
    /// Taken over in an upgrade, it waits for its turn to be asked for its taken page
    /// (TakenPageAgain.swift): what it is sent waits for that ask to go first.
    var waitsForItsPageAsk = false
    /// The callees it had a link to: whose call counts it may report (`linkCalls`).
    var linkedCallees: Set<String> = []
    /// Its links whose callee died, for the calls it sends again (`afterLink`, LinkMarks.swift).
    var endedLinks = EndedLinks()
    /// A standby told to load its plugin before its socket was wired into the loop: the order goes
    /// out as soon as it is (WorkerChannel).
    var loadOrdered = false
    /// The descriptors NIO holds for it (its socket, stdout, stderr) and its frame codec's
    /// leftovers: what an upgrade hands to the next binary (Upgrade/).
    var socketFD: Int32 = -1
    var outputFDs: (stdout: Int32, stderr: Int32)?
    var frameLeftovers: FrameCodec.Leftovers?

    init(process: ChildProcess, manifest: Manifest, temporaryFolder: String, now: NIODeadline) {
        self.process = process
        self.identifier = manifest.identifier
        self.manifest = manifest
        self.temporaryFolder = temporaryFolder
        self.spawnedAt = now
    }

    var pid: pid_t { process.pid }
    var channel: Channel? { if case .open(let channel) = connection { return channel } else { return nil } }
    var socketClosed: Bool { connection == .closed }

    /// Moves to `next` if WorkerPhase allows it (an illegal move is a bug, as for plugins).
    @discardableResult
    func move(to next: WorkerPhase, logger: Logger) -> Bool {
        guard transition(&phase, to: next, of: "the worker of \(identifier) (pid \(pid))", logger: logger) else { return false }
        if next == .running { everRan = true }
        return true
    }

    /// Calls and opens forwarded to it and not yet answered (events and pings aside), and its
    /// callers' links not yet given back (calls over them may still be inside).
    var callsInside: Int { pending.callCount + linksIn.count }
    var hasCallsInside: Bool { !linksIn.isEmpty || pending.hasCalls }
    /// What a drain waits for, in words: its calls, and the links to it its callers have yet to give back.
    var insideDescribed: String {
        let calls = pending.callCount, links = linksIn.count
        let parts = (calls > 0 ? ["\(calls) call(s) inside the worker"] : []) + (links > 0 ? ["\(links) link(s) to it its callers have not given back"] : [])
        return parts.joined(separator: " and ")
    }

    /// Its start (hello, then `startup`'s answer) must come by `deadline`'s firing; a start
    /// deadline set before is cancelled.
    func awaitStart(_ deadline: Scheduled<Void>) {
        startSettled()
        awaiting = .start(deadline: deadline)
    }

    /// It runs, or it ended: its start is no longer waited for.
    func startSettled() {
        guard case .start(let deadline) = awaiting else { return }
        deadline.cancel()
        awaiting = .nothing
    }

    /// The watchdog pinged it (`id`) at `sentAt`. Only a worker whose start is settled is pinged.
    func pinged(id: UInt64, at sentAt: NIODeadline) {
        awaiting = .pong(id: id, sentAt: sentAt)
    }

    /// It answered ping `id`: the last one, or a late answer to one before it (ignored, as is a
    /// pong without an id).
    func ponged(id: UInt64?) {
        if case .pong(let pinged, _) = awaiting, pinged == id { awaiting = .nothing }
    }

    /// Allocates the id of the next request this supervisor sends it.
    func takeID() -> UInt64 { pending.takeID() }

    /// The id its next request gets.
    var nextID: UInt64 { pending.nextID }
}

/// What the supervisor waits for from a worker, one thing at a time: its start, by the start-up
/// timeout (hello, then `startup`'s answer), or, once it runs, the pong of the watchdog's ping.
enum Awaited {
    case nothing
    /// Cancelled when it runs or ends (`startSettled`).
    case start(deadline: Scheduled<Void>)
    case pong(id: UInt64, sentAt: NIODeadline)
}

/// The protocol socket of a worker.
enum WorkerConnection: Equatable {
    /// NIO is still making a channel of the socket.
    case connecting
    case open(Channel)
    /// At end of stream (or it never came up).
    case closed

    static func == (a: WorkerConnection, b: WorkerConnection) -> Bool {
        switch (a, b) {
        case (.connecting, .connecting), (.closed, .closed): return true
        case (.open(let x), .open(let y)): return x === y
        default: return false
        }
    }
}

/// What a worker said about itself in `hello`.
struct HelloFacts {
    var sandbox: [String]
    var sandboxMissing: [String]
    /// The methods its plugin declared idempotent (the SDK's `idempotent: true`), besides the manifest's.
    var idempotent: [String] = []
}

/// A worker's last memory sample (bytes) and whether `memoryWarning` went out for this excursion.
struct MemorySample {
    var resident = 0
    var data = 0
    var warned = false
}
