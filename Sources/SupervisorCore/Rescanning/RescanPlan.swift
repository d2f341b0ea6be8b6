/// What a rescan of the plugin folders (SIGHUP, `supervisor reload`) does with each plugin, decided
/// from values alone: the plugins known before, and the folders as read now. `Lifecycle.rescan`
/// (SupervisorKit, Lifecycle/Rescan.swift) carries it out. Pure, like `RestartPolicy`: tested without a folder or a worker.
package struct RescanPlan {
    /// What the rescan knows of a plugin it already had.
    package struct Known: Equatable {
        package var fingerprint: [UInt8]
        package var bundle: String
        /// An install or update of it is under way (a new version starting beside it, or waiting
        /// for its verdict).
        package var installUnderWay: Bool

        package init(fingerprint: [UInt8], bundle: String, installUnderWay: Bool) {
            self.fingerprint = fingerprint
            self.bundle = bundle
            self.installUnderWay = installUnderWay
        }
    }

    package enum Step {
        /// An install or update is under way: its files are the install's to change, and it
        /// settles the plugin itself (the next rescan sees the outcome).
        case leftToItsInstall
        /// Changed on disk (an offline install, a rebuilt library), or no longer refused (a
        /// permission or a dependency fixed without touching it): restarted on its bundle as read now.
        case restart(Manifest, cured: Bool)
        /// Changed on disk, and cannot start as it is now: stopped, failed with the reason.
        case refuse(Manifest, reason: String)
        /// New: added, and started unless refused.
        case add(Manifest, refused: String?)
        /// Its bundle is gone: stopped (dependents first) and forgotten.
        case remove
    }

    /// Each plugin with a step, new and changed ones in the folders' start order, then the removed
    /// ones in name order; a plugin left as it was has none.
    package var steps: [(identifier: String, step: Step)] = []

    package init(known: [String: Known], before: PluginCatalog, now fresh: PluginCatalog) {
        for id in fresh.order {
            guard let manifest = fresh.all[id] else { continue }
            guard let existing = known[id] else {
                steps.append((id, .add(manifest, refused: fresh.unstartable[id])))
                continue
            }
            if existing.installUnderWay {
                steps.append((id, .leftToItsInstall))
                continue
            }
            let cured = before.unstartable[id] != nil && fresh.unstartable[id] == nil
            guard existing.fingerprint != manifest.fingerprint || existing.bundle != manifest.bundle || cured else { continue }
            if let reason = fresh.unstartable[id] {
                steps.append((id, .refuse(manifest, reason: reason)))
            } else {
                steps.append((id, .restart(manifest, cured: cured && existing.fingerprint == manifest.fingerprint)))
            }
        }
        for id in known.keys.sorted() where fresh.all[id] == nil {
            steps.append((id, .remove))
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
            case .add(_, let refused): return "\(id): add" + (refused == nil ? "" : " refused")
            case .remove: return "\(id): remove"
            }
        }
    }
}
