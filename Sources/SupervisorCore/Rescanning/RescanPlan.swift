/// What a rescan of the plugin folders (SIGHUP, `supervisor reload`) does with each plugin, decided
/// from values alone: the plugins known before, and the folders as read now. `Lifecycle.rescan`
/// (SupervisorKit, Lifecycle/Rescan.swift) carries it out. Pure, like `RestartPolicy`: tested without a folder or a worker.
package struct RescanPlan {
    /// What the rescan knows of a plugin it already had.
    package struct Known: Equatable {
        package var fingerprint: [UInt8]
        package var bundle: String
        /// An install, update or uninstall of it is under way (a new version starting beside it,
        /// waiting for its verdict, or its bundle moved out while it stops).
        package var installUnderWay: Bool
        /// A worker of it serves now (`running`).
        package var isRunning: Bool
        /// It runs no worker until something needs it (`inactive`, SPEC §16).
        package var isInactive: Bool
        /// It runs no worker and starts only when asked (`failed` or `stopped`).
        package var isDown: Bool
        /// Its manifest as it was starts it only on demand (`activation: onCall`, or the
        /// configuration's default).
        package var startsOnCall: Bool
        /// A worker of it is still there (one ending, say, after its dependency failed): what it
        /// does next is its own, so the rescan restarts rather than waits.
        package var hasWorker: Bool
        /// A plugin that depends on it failed because of it (`failed (dependency)`), retried only
        /// when it runs: it is restarted rather than left to wait, or that dependent would stay
        /// failed until something called it.
        package var holdsBackDependents: Bool
        /// Running, why its bundle as read by an earlier rescan could not start (`keep`): said
        /// once, not again while the reason stays the same.
        package var keptReason: String?
        /// An earlier rescan found its bundle gone, and its stop is under way.
        package var removal = Removal.none

        package init(fingerprint: [UInt8], bundle: String, installUnderWay: Bool, isRunning: Bool = false, isInactive: Bool = false,
                     isDown: Bool = false, startsOnCall: Bool = false, hasWorker: Bool = false, holdsBackDependents: Bool = false,
                     keptReason: String? = nil, removal: Removal = .none) {
            self.fingerprint = fingerprint
            self.bundle = bundle
            self.installUnderWay = installUnderWay
            self.isRunning = isRunning
            self.isInactive = isInactive
            self.isDown = isDown
            self.startsOnCall = startsOnCall
            self.hasWorker = hasWorker
            self.holdsBackDependents = holdsBackDependents
            self.keptReason = keptReason
            self.removal = removal
        }
    }

    /// Where a plugin is in its removal, as a rescan reads it.
    package enum Removal: Equatable {
        /// Not being removed.
        case none
        /// Being stopped, to be forgotten when its stop ends.
        case underWay
        /// Being stopped, and its bundle found again by a later rescan: added again, as that read
        /// it, once its stop ends.
        case foundAgain
    }

    package enum Step {
        /// An install or update is under way: its files are the install's to change, and it
        /// settles the plugin itself (the next rescan sees the outcome).
        case leftToItsInstall
        /// Changed on disk (an offline install, a rebuilt library), or no longer refused (a
        /// permission or a dependency fixed without touching it): restarted on its bundle as read now.
        case restart(Manifest, cured: Bool)
        /// Not running, and changed on disk into something that cannot start, or unable to start
        /// now for another plugin's change (a dependency's version out of its range; `changed`
        /// false): failed with the reason (stopped first if it was coming up).
        case refuse(Manifest, reason: String, changed: Bool)
        /// Running, and its bundle as read now could not start (a plugin.json cut short by a save
        /// under way, a field wrong; `changed` false: a dependency's new version out of its range,
        /// a dependency gone): its worker goes on with what it loaded, and the reason is shown
        /// until the bundle is fixed. Said once while the reason stays the same.
        case keep(reason: String, changed: Bool)
        /// Running, refused before and not any more, its bundle unchanged: nothing to restart.
        case cleared
        /// Changed on disk (or no longer refused), and started only on demand: no worker now, it
        /// loads the bundle as read now when it is next needed (`inactive`, SPEC §16). An inactive
        /// plugin stays so; a failed or stopped one becomes so, unless a worker of it is still there
        /// or a plugin that depends on it failed by it (then it is restarted, and that dependent
        /// retried once it runs).
        case awaitNeed(Manifest, cured: Bool)
        /// New: added, and started unless refused.
        case add(Manifest, refused: String?)
        /// Its bundle is gone: stopped (dependents first) and forgotten.
        case remove
        /// Its bundle is back (or read again) while the stop of its removal is under way: the stop
        /// goes on (a worker told `willTerminate` is not called back), and once it has ended the
        /// plugin is added again as new, with this manifest (`refused`: why it cannot start), the
        /// requests that waited for it kept. `again`: an earlier rescan had found it back already
        /// (not counted as new twice).
        case addAfterItsRemoval(Manifest, refused: String?, again: Bool)
        /// Found back by an earlier rescan while being removed, and gone again: forgotten once its
        /// stop ends, as first decided.
        case forgetAfterItsRemoval
    }

    /// Each plugin with a step, new and changed ones in the folders' start order, then the removed
    /// ones in name order; a plugin left as it was has none.
    package var steps: [(identifier: String, step: Step)] = []

    /// `startsOnCall`: whether a manifest as read now starts its plugin only on demand.
    package init(known: [String: Known], before: PluginCatalog, now fresh: PluginCatalog, startsOnCall: (Manifest) -> Bool = { _ in false }) {
        for id in fresh.order {
            guard let manifest = fresh.all[id] else { continue }
            guard let existing = known[id] else {
                steps.append((id, .add(manifest, refused: fresh.unstartable[id])))
                continue
            }
            if existing.removal != .none {
                // What it was does not matter any more: it comes back as a new plugin.
                steps.append((id, .addAfterItsRemoval(manifest, refused: fresh.unstartable[id], again: existing.removal == .foundAgain)))
                continue
            }
            if existing.installUnderWay {
                steps.append((id, .leftToItsInstall))
                continue
            }
            let changed = existing.fingerprint != manifest.fingerprint || existing.bundle != manifest.bundle
            let refusedBefore = before.unstartable[id] != nil
            if let reason = fresh.unstartable[id] {
                if existing.isRunning, existing.keptReason == reason {
                    // Said already; its worker goes on.
                } else if changed {
                    steps.append((id, existing.isRunning ? .keep(reason: reason, changed: true) : .refuse(manifest, reason: reason, changed: true)))
                } else if !refusedBefore || existing.isRunning {
                    // Unchanged, refused now for another plugin's change (a dependency's version
                    // out of its range, a dependency gone): a running one goes on, an inactive one
                    // is not to be woken by a call; one coming up fails by its dependency as it would have.
                    if existing.isRunning { steps.append((id, .keep(reason: reason, changed: false))) }
                    if existing.isInactive { steps.append((id, .refuse(manifest, reason: reason, changed: false))) }
                }
            } else if changed || refusedBefore {
                let cured = !changed
                if cured, existing.isRunning {
                    steps.append((id, .cleared))
                    continue
                }
                // Nothing runs to restart: an inactive plugin loads what is on disk when it is next
                // needed, unless its manifest now wants it started with the supervisor where it did
                // not; a failed or stopped one that starts on demand waits for that demand.
                let onCall = startsOnCall(manifest)
                let awaits = existing.isInactive ? !(existing.startsOnCall && !onCall)
                    : existing.isDown && onCall && !existing.hasWorker && !existing.holdsBackDependents
                steps.append((id, awaits ? .awaitNeed(manifest, cured: cured) : .restart(manifest, cured: cured)))
            }
        }
        for (id, existing) in known.sorted(by: { $0.key < $1.key }) where fresh.all[id] == nil {
            switch existing.removal {
            // Gone from the folders for an install or an uninstall under way: left to it.
            case .none: steps.append((id, existing.installUnderWay ? .leftToItsInstall : .remove))
            case .underWay: break // still gone, still being removed
            case .foundAgain: steps.append((id, .forgetAfterItsRemoval))
            }
        }
    }

    package var removed: Set<String> {
        Set(steps.compactMap { if case .remove = $0.step { $0.identifier } else { nil } })
    }

    /// Each step in a word or two (`b: restart`, `c: add refused`), for logs and tests.
    package var summary: [String] {
        steps.map { id, step in
            switch step {
            case .leftToItsInstall: return "\(id): left to its install"
            case .restart(_, let cured): return "\(id): restart" + (cured ? " (cured)" : "")
            case .refuse: return "\(id): refuse"
            case .keep: return "\(id): keep"
            case .cleared: return "\(id): cleared"
            case .awaitNeed(_, let cured): return "\(id): await need" + (cured ? " (cured)" : "")
            case .add(_, let refused): return "\(id): add" + (refused == nil ? "" : " refused")
            case .remove: return "\(id): remove"
            case .addAfterItsRemoval(_, let refused, let again):
                return "\(id): add after its removal" + (refused == nil ? "" : " refused") + (again ? " (again)" : "")
            case .forgetAfterItsRemoval: return "\(id): forget after its removal"
            }
        }
    }
}
