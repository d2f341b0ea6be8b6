import LinuxSupport

/// Where a plugin is in its life, across its workers (SPEC §6's states, plus `waiting`).
/// Every change goes through `PluginRecord.move(to:)`, which refuses a move this table does not allow.
enum PluginPhase: Equatable, Sendable, CustomStringConvertible {
    /// Known and startable; its dependencies are not running yet (shown as `starting`).
    case waiting
    /// Its first worker (or the first after a `restart` command or an install) is coming up.
    case starting
    case running
    /// It crashed: a restart is scheduled, or its next worker is coming up.
    case restarting
    /// It will not start until asked (`problem` says why). `byDependency`: only because a
    /// dependency could not start; it is retried when that dependency runs.
    case failed(byDependency: Bool)
    /// Stopped on purpose (shutdown, uninstall, removal) or exited cleanly under `on-failure`.
    case stopped

    /// The state `status` shows.
    var shown: String {
        switch self {
        case .waiting, .starting: return "starting"
        case .running: return "running"
        case .restarting: return "restarting"
        case .failed: return "failed"
        case .stopped: return "stopped"
        }
    }

    var description: String {
        switch self {
        case .waiting: return "waiting"
        case .failed(let byDependency): return byDependency ? "failed (dependency)" : "failed"
        default: return shown
        }
    }

    var isFailed: Bool { if case .failed = self { return true } else { return false } }

    /// Coming up: a worker exists or is about to, and has not yet answered `startup`.
    var isStarting: Bool { self == .waiting || self == .starting || self == .restarting }

    /// The legal moves, all in one place.
    static func allows(from: PluginPhase, to: PluginPhase) -> Bool {
        switch (from, to) {
        // A worker is spawned: the first time (or after a clean slate) it is `starting`; after a
        // crash, `restarting`. A failed or stopped plugin starts again only on request (restart,
        // install, a dependency back).
        case (.waiting, .starting), (.stopped, .starting), (.failed, .starting): return true
        case (.waiting, .restarting), (.restarting, .restarting), (.stopped, .restarting), (.failed, .restarting): return true
        // A worker that crashed while starting or running is restarted.
        case (.starting, .restarting), (.running, .restarting): return true
        // Only a worker that answered `startup` runs.
        case (.starting, .running), (.restarting, .running): return true
        // Waiting for dependencies again: a restart whose dependencies are down, a start request.
        case (.restarting, .waiting), (.stopped, .waiting), (.failed, .waiting), (.waiting, .waiting): return true
        // Anything can fail or be stopped.
        case (_, .failed), (_, .stopped): return true
        default: return false
        }
    }
}

/// Where one worker process is in its life. `WorkerInstance.move(to:)` refuses a move this table
/// does not allow.
enum WorkerPhase: Equatable, Sendable, CustomStringConvertible {
    /// The process was spawned; it has not said `hello` yet.
    case spawned
    /// It said `hello` (sandboxed, plugin loaded); `startup` waits until its dependencies run.
    case loaded
    /// `startup` was sent.
    case startingUp
    /// It answered `startup`.
    case running
    /// The supervisor is stopping it and waits, up to `drainTimeoutMs`, for the calls inside it to
    /// be answered (SPEC §8); new calls wait for its successor meanwhile.
    case draining
    /// The supervisor is stopping it on purpose (willTerminate, or SIGKILL before hello).
    case stopping
    /// Reaped, with how it ended. Its last frames (an `exit` notice) may still be unread in its
    /// socket. `afterStop`: it was being stopped on purpose.
    case exited(afterStop: Bool, ChildExit)
    /// Its exit has been recorded and acted on.
    case finalized

    var description: String {
        switch self {
        case .spawned: return "spawned"
        case .loaded: return "loaded"
        case .startingUp: return "startingUp"
        case .running: return "running"
        case .draining: return "draining"
        case .stopping: return "stopping"
        case .exited(let afterStop, _): return afterStop ? "exited (stopped)" : "exited"
        case .finalized: return "finalized"
        }
    }

    /// Reaped (its exit is known).
    var hasExited: Bool {
        switch self {
        case .exited, .finalized: return true
        default: return false
        }
    }

    /// Being stopped on purpose, or ended that way.
    var stopRequested: Bool {
        switch self {
        case .draining, .stopping, .exited(afterStop: true, _): return true
        default: return false
        }
    }

    static func allows(from: WorkerPhase, to: WorkerPhase) -> Bool {
        switch (from, to) {
        case (.spawned, .loaded), (.loaded, .startingUp), (.startingUp, .running): return true
        case (.spawned, .stopping), (.loaded, .stopping), (.startingUp, .stopping), (.running, .stopping): return true
        // Only a worker with calls inside drains (it said hello, so it has a socket to answer on).
        case (.loaded, .draining), (.startingUp, .draining), (.running, .draining), (.draining, .stopping): return true
        case (.stopping, .exited(afterStop: true, _)), (.draining, .exited(afterStop: true, _)): return true
        case (.spawned, .exited(afterStop: false, _)), (.loaded, .exited(afterStop: false, _)),
             (.startingUp, .exited(afterStop: false, _)), (.running, .exited(afterStop: false, _)): return true
        case (.exited, .finalized): return true
        default: return false
        }
    }
}
