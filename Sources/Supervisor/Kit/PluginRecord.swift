import Bundles
import LinuxSupport
import NIOCore
import PluginProtocol
#if canImport(Glibc)
import Glibc
#endif

/// A plugin's state (SPEC §6). `waiting` is internal: known and startable, its dependencies not yet running.
enum PluginState: String, Sendable {
    case waiting, starting, running, restarting, failed, stopped

    /// The name `status` shows.
    var shown: String { self == .waiting ? "starting" : rawValue }
}

/// Where a reply must go.
/// Confined to the supervisor's event loop like everything it refers to.
enum ReplyOrigin: @unchecked Sendable {
    /// A CLI client, with the id it used.
    case client(ControlConnection, id: UInt64)
    /// A plugin's worker, with the id the plugin used.
    case plugin(WorkerInstance, id: UInt64)
    /// The supervisor itself (events, internal calls).
    case local((Result<[UInt8]?, ErrorBody>) -> Void)
}

/// A request sent to a worker and not yet answered.
struct PendingRequest {
    var origin: ReplyOrigin
    var deadline: NIODeadline
    var what: String
}

/// One running worker process for a plugin. Confined to the supervisor's event loop.
final class WorkerInstance: @unchecked Sendable {
    let process: ChildProcess
    var pid: pid_t { process.pid }
    let identifier: String
    var channel: Channel?
    var helloReceived = false
    /// Said hello, but a dependency is not running yet: `startup` waits for it.
    var awaitingDependencies = false
    var pending: [UInt64: PendingRequest] = [:]
    var nextID: UInt64 = 1
    /// Set when the worker said why it is ending itself.
    var exitNotice: ExitNotice?
    /// Set when the supervisor killed it, with why (watchdog, protocolViolation, startupTimeout, ...).
    var killReason: (reason: String, message: String)?
    /// The supervisor is stopping it on purpose (shutdown, restart command).
    var stopRequested = false
    var exited = false
    /// How the process ended, once reaped.
    var exit: ChildExit?
    /// The protocol socket reached EOF (or never came up).
    var socketClosed = false
    /// The exit has been recorded and acted on.
    var finalized = false
    let spawnedAt: NIODeadline
    var outstandingPing: (id: UInt64, sentAt: NIODeadline)?
    var sandbox: [String] = []
    var sandboxMissing: [String] = []
    var timings: [String: Int] = [:]
    var onExit: [() -> Void] = []
    /// Requests this plugin made that are being served elsewhere: its id → (the callee, the callee's id).
    /// Cancelled at the callee if this worker dies first.
    var outgoing: [UInt64: (callee: WorkerInstance, id: UInt64)] = [:]
    /// Last memory sample (bytes) and whether `memoryWarning` was sent for the current excursion.
    var lastRSS = 0
    var lastData = 0
    var memoryWarned = false
    /// Log messages in the current one-second window, and how many were dropped.
    var logWindowStart = NIODeadline.now()
    var logsInWindow = 0
    var logsDropped = 0

    init(process: ChildProcess, identifier: String, now: NIODeadline) {
        self.process = process
        self.identifier = identifier
        self.spawnedAt = now
    }
}

/// Everything the supervisor knows of one plugin, across its worker restarts.
final class PluginRecord: @unchecked Sendable {
    var manifest: Manifest
    var state: PluginState
    var instance: WorkerInstance?
    /// Restarts over the plugin's life (what `status` shows).
    var restarts = 0
    /// When recent restarts happened, for the intensity limit.
    var restartTimes: [NIODeadline] = []
    var lastExit: ExitStatus?
    /// The library chosen for this host.
    var library: String?
    var variant: String?
    /// Why it is not running, when it is not.
    var problem: String?
    /// Failed only because a dependency could not start; retried when that dependency runs.
    var failedByDependency = false
    /// An install is waiting to see this version run: its first failure settles the waiters at
    /// once (to roll back) instead of going through restarts.
    var rollbackOnFailure = false
    /// Has reached `running` at least once (so a later start is a restart dependents hear of).
    var hasRun = false
    /// Callers waiting for it to be running (restart command); called with nil or the reason it failed.
    var startWaiters: [(String?) -> Void] = []
    var pendingRestart: Scheduled<Void>?

    init(manifest: Manifest, state: PluginState) {
        self.manifest = manifest
        self.state = state
    }

    var identifier: String { manifest.identifier }
    var dependencyIDs: [String] { manifest.dependencies.map(\.identifier) }

    func settleWaiters(_ problem: String?) {
        let waiters = startWaiters
        startWaiters = []
        for w in waiters { w(problem) }
    }
}

/// A CLI client on the control socket. Confined to the supervisor's event loop.
final class ControlConnection: @unchecked Sendable {
    let channel: Channel
    var closed = false
    /// Requests of this client still waiting for an answer.
    var outstanding = 0
    /// Its forwarded calls in flight: its id → (the callee, the callee's id), cancelled if it goes away.
    var inFlight: [UInt64: (callee: WorkerInstance, id: UInt64)] = [:]

    init(channel: Channel) {
        self.channel = channel
    }
}
