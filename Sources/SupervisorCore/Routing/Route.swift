import PluginProtocol

/// Where a request for a plugin goes now (SPEC §8): to its worker, into its wait queue, or back
/// to its caller with an error. The one rule for it: the driver asks before every forward, also
/// when a queued request's turn comes.
package enum Route: Equatable, Sendable {
    /// The worker takes it now.
    case forward
    /// The plugin is coming up or its worker is being replaced: it waits (`WaitQueue`).
    case wait
    /// The plugin is `inactive` (SPEC §16): it waits (`WaitQueue`) and the plugin is activated
    /// (`PluginLife.activate`), as for a call to a `starting` plugin.
    case activate
    /// It cannot be served: the error to answer with.
    case refuse(ErrorBody)

    /// A plugin's state as the route reads it.
    package struct Target: Sendable {
        package var identifier: String
        package var phase: PluginPhase
        /// Why it is not running, when it is not.
        package var problem: String?
        /// Its serving worker, if it has one.
        package var worker: Worker?

        package init(identifier: String, phase: PluginPhase, problem: String? = nil, worker: Worker? = nil) {
            self.identifier = identifier
            self.phase = phase
            self.problem = problem
            self.worker = worker
        }
    }

    /// The serving worker's state as the route reads it.
    package struct Worker: Sendable {
        /// It is being stopped (draining, stopping) or has ended.
        package var stopRequested: Bool
        /// Its socket is wired and open.
        package var connected: Bool
        /// A link to it ended by itself: it may be ending, not yet reaped.
        package var mayHaveEnded: Bool
        /// Its socket takes more now (not full).
        package var writable: Bool
        /// Taken over in an upgrade in place, it waits for its turn to be asked for its taken page
        /// (SPEC §15, `PageAsks`): the ask goes before anything else, so that a call that holds its
        /// I/O thread cannot hold the answer back.
        package var awaitsItsPageAsk: Bool

        package init(stopRequested: Bool = false, connected: Bool = true, mayHaveEnded: Bool = false, writable: Bool = true,
                     awaitsItsPageAsk: Bool = false) {
            self.stopRequested = stopRequested
            self.connected = connected
            self.mayHaveEnded = mayHaveEnded
            self.writable = writable
            self.awaitsItsPageAsk = awaitsItsPageAsk
        }

        /// It may be sent a request now.
        var takesRequests: Bool { !stopRequested && connected && !mayHaveEnded && writable && !awaitsItsPageAsk }
    }

    /// The route of a request for `target` (nil: no such plugin).
    package static func decide(_ target: Target?, named identifier: String, shuttingDown: Bool) -> Route {
        guard let target else { return .refuse(ErrorBody(.notFound, "no plugin \(identifier) is installed")) }
        if target.phase == .running, let worker = target.worker, worker.takesRequests { return .forward }
        if target.phase == .inactive, !shuttingDown { return .activate }
        if mustWait(target, shuttingDown: shuttingDown) { return .wait }
        if shuttingDown { return .refuse(ErrorBody(.unavailable, "\(identifier) is stopping: the supervisor is shutting down")) }
        return .refuse(unavailable(target))
    }

    /// Whether a request that cannot go now waits: the plugin is coming up (waiting for its
    /// dependencies, starting, restarting after a crash), or its worker is draining for a planned
    /// stop (a restart, a reload, an update, the shutdown), not connected yet, waits to be asked
    /// for its taken page after an upgrade, or has more queued than its socket takes now (back-pressure: a large request, or a plugin slow to read, holds
    /// the next ones in its wait queue, bounded as any wait is, until the socket drains; one that
    /// stops reading for good answers no ping, and its watchdog ends it).
    package static func mustWait(_ target: Target, shuttingDown: Bool) -> Bool {
        guard !shuttingDown else { return false }
        switch target.phase {
        case .waiting, .starting, .restarting, .inactive: return true
        case .running:
            guard let worker = target.worker else { return true }
            return !worker.takesRequests
        case .failed, .stopped: return false
        }
    }

    /// The error for a plugin that is failed or stopped.
    package static func unavailable(_ target: Target) -> ErrorBody {
        ErrorBody(.unavailable, "\(target.identifier) is \(target.phase.shown)" + (target.problem.map { ": \($0)" } ?? ""))
    }

    /// The error for a request that would wait but finds `limit` waiting already.
    package static func queueFull(_ target: Target, limit: Int) -> ErrorBody {
        ErrorBody(.unavailable, "\(waitingFor(target)) and \(limit) requests already wait for it (callQueueLimit)")
    }

    /// What a request that waits for `target` waits for: its start, or (running) room in its socket.
    package static func waitingFor(_ target: Target) -> String {
        if target.phase == .running, target.worker?.writable == false { return "\(target.identifier) is not keeping up (its socket buffer is full)" }
        return "\(target.identifier) is \(target.phase.shown)"
    }

    /// Whether `target` runs but its socket takes no more now: an event broadcast to every plugin
    /// names it among those it did not reach, rather than wait for it.
    package static func notKeepingUp(_ target: Target) -> ErrorBody? {
        guard target.phase == .running, let worker = target.worker, worker.writable == false, !worker.stopRequested else { return nil }
        return ErrorBody(.unavailable, "\(target.identifier) is not keeping up: its socket buffer is full")
    }

    /// Why requests still waiting for `target` fail now, or nil while they may wait on: the
    /// supervisor shuts down, or the plugin is failed or stopped for good. An `inactive` plugin's
    /// requests wait for its activation.
    package static func abandonReason(_ target: Target, shuttingDown: Bool) -> String? {
        if shuttingDown { return "the supervisor is shutting down" }
        if target.phase.isFailed || target.phase == .stopped {
            return "\(target.identifier) is \(target.phase.shown)" + (target.problem.map { ": \($0)" } ?? "")
        }
        return nil
    }
}
