/// How plugins come up (SPEC §4, §6): workers are spawned at once, all in parallel (exec,
/// sandbox, dlopen and hello cost the same whatever the order); a plugin gets `startup` only
/// once every dependency runs; one whose dependency failed for good fails too. And when the
/// first start is over, so that the ready line can be printed; and what a plugin's dependents
/// are told when it serves again.
package enum StartOrder {
    /// A plugin as these rules read it.
    package struct Plugin: Sendable, Equatable {
        package var identifier: String
        package var phase: PluginPhase
        package var dependencies: [String]
        /// Its worker said hello and waits for `startup` (loaded, not started up).
        package var parked: Bool
        package var hasWorker: Bool
        package var hasRun: Bool
        /// A worker of it has ended at least once.
        package var hasExited: Bool
        /// Inactive, and activated already: its spawn waits for a turn (`SpawnPace`).
        package var activating: Bool
        /// It starts only when something needs it (`activation: onCall`, SPEC §16).
        package var onCall: Bool

        package init(identifier: String, phase: PluginPhase, dependencies: [String] = [], parked: Bool = false, hasWorker: Bool = false,
                     hasRun: Bool = false, hasExited: Bool = false, activating: Bool = false, onCall: Bool = false) {
            self.identifier = identifier
            self.phase = phase
            self.dependencies = dependencies
            self.parked = parked
            self.hasWorker = hasWorker
            self.hasRun = hasRun
            self.hasExited = hasExited
            self.activating = activating
            self.onCall = onCall
        }
    }

    /// What to do with one plugin now.
    package enum Step: Equatable, Sendable {
        /// A dependency is `inactive` (SPEC §16): it is activated first, for this dependent.
        case activate(dependency: String)
        /// A dependency failed, or stopped outside a shutdown, or is no longer installed (`phase`
        /// nil: a rescan or an uninstall removed it while this plugin was coming up): it fails too
        /// (`PluginLife.dependencyFailed`).
        case failByDependency(dependency: String, phase: PluginPhase?)
        /// Spawn its worker.
        case spawn
        /// Its dependencies run: send `startup` to its parked worker.
        case startup
    }

    /// The step for `plugin`, given those of its dependencies that are installed, as they are now.
    /// Nil: nothing to do yet.
    package static func step(for plugin: Plugin, dependencies: [Plugin], shuttingDown: Bool) -> Step? {
        guard plugin.phase == .waiting || (plugin.phase.isStarting && plugin.parked) else { return nil }
        if let dead = dependencies.first(where: { $0.phase.isFailed || ($0.phase == .stopped && !shuttingDown) }) {
            return .failByDependency(dependency: dead.identifier, phase: dead.phase)
        }
        // One that is gone: the catalog refuses a plugin whose dependency is missing, but a rescan
        // or an uninstall may remove the dependency while this plugin is coming up.
        if !shuttingDown, let gone = plugin.dependencies.first(where: { id in !dependencies.contains { $0.identifier == id } }) {
            return .failByDependency(dependency: gone, phase: nil)
        }
        // Activated once; one whose spawn waits for its turn is waited for, not activated again.
        if let idle = dependencies.first(where: { $0.phase == .inactive }) { return idle.activating ? nil : .activate(dependency: idle.identifier) }
        if plugin.phase == .waiting { return .spawn }
        if !shuttingDown, plugin.hasWorker, dependencies.allSatisfy({ $0.phase == .running }) { return .startup }
        return nil
    }

    /// Whether `plugin`'s first start is over, for the ready line: running, failed or stopped;
    /// coming up after it ran or ended once; or waiting for a dependency whose own first start is
    /// over without running (it may wait long). `lookup` finds a plugin by identifier.
    package static func firstStartSettled(_ plugin: Plugin, lookup: (String) -> Plugin?) -> Bool {
        var seen: Set<String> = []
        return settled(plugin, lookup: lookup, seen: &seen)
    }

    private static func settled(_ plugin: Plugin, lookup: (String) -> Plugin?, seen: inout Set<String>) -> Bool {
        switch plugin.phase {
        // An inactive plugin is ready as it is: nothing of it runs until it is needed (SPEC §16).
        case .running, .failed, .stopped, .inactive: return true
        case .starting, .restarting:
            if plugin.hasRun || plugin.hasExited { return true }
            // Loaded and waiting for `startup` until its dependencies run: as a waiting plugin.
            return plugin.phase.isStarting && plugin.parked && waitsOnSettled(plugin, lookup: lookup, seen: &seen)
        case .waiting:
            return waitsOnSettled(plugin, lookup: lookup, seen: &seen)
        }
    }

    /// Whether one of `plugin`'s dependencies is not running and its own first start is over (it
    /// failed, or restarts: it may be long).
    private static func waitsOnSettled(_ plugin: Plugin, lookup: (String) -> Plugin?, seen: inout Set<String>) -> Bool {
        // A cycle never starts (the catalog refuses it); followed once, it settles nothing.
        guard seen.insert(plugin.identifier).inserted else { return false }
        return plugin.dependencies.contains { id in
            guard let dependency = lookup(id) else { return true }
            return dependency.phase != .running && settled(dependency, lookup: lookup, seen: &seen)
        }
    }

    /// What a dependent hears when a plugin serves (again).
    package enum Notice: Equatable, Sendable {
        /// It failed only because this plugin was down: it waits to start again.
        case retry(String)
        /// The same, for one that starts only on demand: `inactive` until something needs it.
        case awaitNeed(String)
        /// The plugin restarted and lost its state: `dependencyRestarted`.
        case tell(String)
        /// The same, with `restartDependents`: its worker is restarted too.
        case restart(String)
    }

    /// The notices for `dependents` (in start order) when a plugin serves; `restarted`: it ran
    /// before (a crash, a restart), not its first start. A dependent failed by its dependencies
    /// is tried again only once none of them is down any more (else it would fail again, and say
    /// so again); `lookup` finds a plugin by identifier (nil: not installed).
    package static func notices(dependents: [Plugin], restarted: Bool, restartDependents: Bool, shuttingDown: Bool,
                                lookup: (String) -> Plugin?) -> [Notice] {
        var out: [Notice] = []
        for dependent in dependents where !shuttingDown && !dependent.hasWorker && dependent.phase == .failed(byDependency: true) {
            let heldBack = dependent.dependencies.contains { id in
                guard let dependency = lookup(id) else { return true }
                return dependency.phase.isFailed || dependency.phase == .stopped
            }
            guard !heldBack else { continue }
            out.append(dependent.onCall ? .awaitNeed(dependent.identifier) : .retry(dependent.identifier))
        }
        if restarted {
            for dependent in dependents where dependent.phase == .running {
                out.append(restartDependents && dependent.hasWorker ? .restart(dependent.identifier) : .tell(dependent.identifier))
            }
        }
        return out
    }
}
