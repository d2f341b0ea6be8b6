import CallTracking

/// The reloads under way (SIGHUP, `supervisor reload`) and when each is answered: once no plugin
/// is coming up and none that a rescan stops or restarts is still on its way, at shutdown, or at
/// the reload's own deadline, whichever comes first. Its answer then counts what the rescan left.
///
/// `Lifecycle` (SupervisorKit, Lifecycle/Rescan.swift) tells it what each rescan began and what
/// ended, and asks `due` after every change of a plugin's phase; it arms a timer for each
/// reload's `until` and answers what `due` hands back. `Reload` is the driver's: what it answers
/// with, and the timer it cancels then.
package struct ReloadWaits<Reload> {
    private var waiting: [(until: Instant, reload: Reload)] = []
    /// Plugins a rescan is stopping (removed from the folders, or refused as they are now).
    private var stopping: Set<String> = []
    /// Plugins a rescan restarts on their changed bundles, counted: a second reload (or a
    /// `restart`) of one plugin before the first's start has ended ends that start early, and must
    /// not let either reload answer before the plugin runs again (or has failed).
    private var restarting: [String: Int] = [:]

    package init() {}

    package var isEmpty: Bool { waiting.isEmpty }

    /// A reload has rescanned; it is answered by `until` at the latest.
    package mutating func began(_ reload: Reload, until: Instant) {
        waiting.append((until, reload))
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

    /// Whether a plugin in `phase` holds back the answer to a reload: one coming up (waiting for
    /// its dependencies, starting, restarting) may yet fail, and the answer counts it.
    package static func holdsBack(_ phase: PluginPhase) -> Bool { phase.isStarting }

    /// The reloads to answer now, in the order they came, taken from those waiting. `phases`: every
    /// plugin's; `isKnown`: whether a plugin is still in the table (one forgotten meanwhile, as an
    /// uninstall forgets it, holds nothing back).
    package mutating func due(now: Instant, shuttingDown: Bool, phases: some Sequence<PluginPhase>,
                              isKnown: (String) -> Bool) -> [Reload] {
        guard !waiting.isEmpty else { return [] }
        let busy = stopping.contains(where: isKnown) || restarting.keys.contains(where: isKnown)
            || phases.contains(where: Self.holdsBack)
        var answered: [Reload] = []
        waiting.removeAll { entry in
            guard !busy || shuttingDown || now >= entry.until else { return false }
            answered.append(entry.reload)
            return true
        }
        return answered
    }
}
