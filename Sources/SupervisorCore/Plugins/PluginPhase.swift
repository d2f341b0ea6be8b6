/// Where a plugin is in its life, across its workers (SPEC §6's states, plus `waiting`).
/// Every change goes through `PluginLife.move(to:)`, which refuses a move this table does not allow.
package enum PluginPhase: Equatable, Sendable, CustomStringConvertible {
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
    /// No worker until something needs it (SPEC §16): an `onCall` plugin not yet called, or one
    /// stopped after `idleStopMs` without traffic. A call, open, stream, event or a dependent's
    /// start activates it (`PluginLife.activate`).
    case inactive

    /// The state `status` shows.
    package var shown: String {
        switch self {
        case .waiting, .starting: return "starting"
        case .running: return "running"
        case .restarting: return "restarting"
        case .failed: return "failed"
        case .stopped: return "stopped"
        case .inactive: return "inactive"
        }
    }

    package var description: String {
        switch self {
        case .waiting: return "waiting"
        case .failed(let byDependency): return byDependency ? "failed (dependency)" : "failed"
        default: return shown
        }
    }

    package var isFailed: Bool { if case .failed = self { return true } else { return false } }

    /// Coming up: a worker exists or is about to, and has not yet answered `startup`.
    package var isStarting: Bool { self == .waiting || self == .starting || self == .restarting }

    /// The legal moves, all in one place.
    package static func allows(from: PluginPhase, to: PluginPhase) -> Bool {
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
        // Activated (SPEC §16): its worker is spawned, or it waits for its dependencies first. An
        // `onCall` plugin found at start (or resumed after an upgrade) that nothing needs yet.
        case (.inactive, .starting), (.inactive, .waiting), (.waiting, .inactive): return true
        // Stopped after being idle: its worker ended on an idle stop. A failed or stopped plugin
        // that starts on demand, its bundle changed or no longer refused: it waits to be needed.
        case (.running, .inactive), (.failed, .inactive), (.stopped, .inactive): return true
        // Anything can fail or be stopped.
        case (_, .failed), (_, .stopped): return true
        default: return false
        }
    }
}
