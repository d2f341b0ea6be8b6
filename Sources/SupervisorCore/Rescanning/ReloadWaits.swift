import CallTracking

/// The reloads under way (SIGHUP, `supervisor reload`) and when each is answered: once none of the
/// plugins its rescan set coming up is still on its way, and none that a rescan stops or restarts,
/// at shutdown, or at the reload's own deadline, whichever comes first. Its answer then counts
/// what the rescan left. A plugin coming up for another reason (a crash's restart, a backoff, an
/// activation) holds no reload back: a crash-looping plugin would hold every reload, and
/// `systemctl reload` with it, until the reload's deadline.
///
/// `Lifecycle` (SupervisorKit, Lifecycle/Rescan.swift) tells it what each rescan began and what
/// ended, and asks `due` after every change of a plugin's phase; it arms a timer for each
/// reload's `until` and answers what `due` hands back. `Reload` is the driver's: what it answers
/// with, and the timer it cancels then.
package struct ReloadWaits<Reload> {
    private var waiting: [(until: Instant, reload: Reload, comingUp: Set<String>)] = []
    /// Plugins a rescan is stopping (removed from the folders, or refused as they are now).
    private var stopping: Set<String> = []
    /// Plugins a rescan restarts on their changed bundles, counted: a second reload (or a
    /// `restart`) of one plugin before the first's start has ended ends that start early, and must
    /// not let either reload answer before the plugin runs again (or has failed).
    private var restarting: [String: Int] = [:]

    package init() {}

    package var isEmpty: Bool { waiting.isEmpty }

    /// A reload has rescanned; it is answered by `until` at the latest. `comingUp`: the plugins its
    /// rescan set coming up (new ones, ones it took from a stop or a failure).
    /// A reload that comes while earlier ones wait waits for what they started too: answered
    /// first, it would count those plugins before their starts had ended.
    package mutating func began(_ reload: Reload, until: Instant, comingUp: Set<String> = []) {
        let earlier = waiting.reduce(into: Set<String>()) { $0.formUnion($1.comingUp) }
        waiting.append((until, reload, comingUp.union(earlier)))
    }

    /// A rescan stops `ids`; `stopped` as each has.
    package mutating func stopping(_ ids: some Sequence<String>) { stopping.formUnion(ids) }
    package mutating func stopped(_ id: String) { stopping.remove(id) }

    /// A rescan restarts `id`; `restarted` once that start has ended (running, failed or cut short).
    package mutating func restarting(_ id: String) { restarting[id, default: 0] += 1 }
    package mutating func restarted(_ id: String) {
        guard let n = restarting[id] else { return }
        restarting[id] = n > 1 ? n - 1 : nil
    }

    /// Whether a plugin in `phase` holds back the answer to a reload that set it coming up: one
    /// waiting for its dependencies, starting or restarting may yet fail, and the answer counts it.
    package static func holdsBack(_ phase: PluginPhase) -> Bool { phase.isStarting }

    /// The reloads to answer now, in the order they came, taken from those waiting. `phase`: a
    /// plugin's, nil when it is no longer in the table (one forgotten meanwhile, as an uninstall
    /// forgets it, holds nothing back).
    package mutating func due(now: Instant, shuttingDown: Bool, phase: (String) -> PluginPhase?) -> [Reload] {
        guard !waiting.isEmpty else { return [] }
        let busy = stopping.contains { phase($0) != nil } || restarting.keys.contains { phase($0) != nil }
        var answered: [Reload] = []
        waiting.removeAll { entry in
            let held = busy || entry.comingUp.contains { phase($0).map(Self.holdsBack) ?? false }
            guard !held || shuttingDown || now >= entry.until else { return false }
            answered.append(entry.reload)
            return true
        }
        return answered
    }
}
