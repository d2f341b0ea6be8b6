/// When a running plugin with `idleStopMs` is stopped for having had nothing to do (SPEC §16): no
/// call, stream or link traffic for that long. The driver keeps when traffic last passed and asks at
/// its health tick; an idle stop is a clean stop (`willTerminate`, drain) after which the plugin is
/// `inactive` (`PluginLife.workerEnded` with `Circumstances.idleStopAfterMs`).
package enum IdleStop {
    /// A plugin as the rule reads it.
    package struct Facts: Sendable, Equatable {
        package var phase: PluginPhase
        /// Its `idleStopMs` (manifest, else the configuration's default); nil: never stopped for idleness.
        package var idleStopMs: Int?
        /// When a call, a stream's chunk or credit, or a link's call last passed (or its worker began to serve).
        package var lastTraffic: Instant
        /// Something is inside or under way: a request in flight or waiting, an open stream, a
        /// stop, an update or a standby being taken. Never idle then.
        package var busy: Bool
        /// Callers hold direct or peer links to it: their calls are known only from their
        /// `linkCalls` reports, so it is idle only after `linkReportsMs` without one at least.
        package var linked = false

        package init(phase: PluginPhase, idleStopMs: Int?, lastTraffic: Instant, busy: Bool, linked: Bool = false) {
            self.phase = phase
            self.idleStopMs = idleStopMs
            self.lastTraffic = lastTraffic
            self.busy = busy
            self.linked = linked
        }
    }

    /// Twice the longest interval at which a link's caller reports the calls it made (a program's
    /// direct link, every second while it calls; a worker's peer link, every 250 ms): a linked
    /// plugin that has gone this long without a report has had no calls over its links.
    package static let linkReportsMs = 2_000

    package enum Verdict: Sendable, Equatable {
        /// Stop it now: it has had no traffic for this long.
        case stop(idleMs: Int)
        /// Ask again at this time (or at the next tick after it).
        case check(at: Instant)
        /// It is not stopped for idleness (no `idleStopMs`, or not running).
        case never
    }

    package static func decide(_ facts: Facts, now: Instant) -> Verdict {
        guard let wanted = facts.idleStopMs, wanted > 0, facts.phase == .running else { return .never }
        let limit = facts.linked ? max(wanted, linkReportsMs) : wanted
        if facts.busy { return .check(at: now.adding(milliseconds: limit)) }
        let idleNs = now.nanoseconds(since: facts.lastTraffic)
        if idleNs >= Int64(limit) * 1_000_000 { return .stop(idleMs: Int(idleNs / 1_000_000)) }
        return .check(at: facts.lastTraffic.adding(milliseconds: limit))
    }

    /// Whether a plugin just started for an install or an update (or its rollback) stops again at
    /// once: it is `onCall`, it was started only to prove that its version loads (new, or
    /// `inactive` before), it runs, and nothing is inside or waiting for it.
    package static func afterItsInstall(startedOnlyToProve: Bool, onCall: Bool, phase: PluginPhase, stopping: Bool, busy: Bool) -> Bool {
        startedOnlyToProve && onCall && phase == .running && !stopping && !busy
    }
}
