import Bundles
import Logging
import NIOCore

extension Lifecycle {
    /// SIGHUP: read the plugin folders again. New plugins start; removed ones stop (dependents
    /// first); a plugin whose manifest or library changed on disk (an offline install, a rebuilt
    /// library) is restarted on its new bundle. Unrelated plugins are not touched.
    func rescan() {
        loop.preconditionInEventLoop()
        guard !isShuttingDown else { return }
        let fresh = PluginCatalog(directories: config.pluginDirectories)
        for problem in fresh.problems { logger.error("\(problem)") }
        table.catalog = fresh
        let removed = Set(table.identifiers.filter { fresh.all[$0] == nil })
        let previousOrder = table.order
        var started = 0, changed = 0
        for id in fresh.order {
            guard let manifest = fresh.all[id] else { continue }
            if let existing = table[id] {
                guard existing.manifest.fingerprint != manifest.fingerprint || existing.manifest.bundle != manifest.bundle else { continue }
                changed += 1
                existing.manifest = manifest
                if let reason = fresh.unstartable[id] {
                    logger.error("\(id) changed on disk and cannot start: \(reason)")
                    stopPlugin(existing) { [self] in
                        existing.move(to: .failed(byDependency: false), logger: logger)
                        existing.problem = reason
                    }
                    continue
                }
                logger.notice("\(id) changed on disk (now \(manifest.version)): restarting it")
                restartCommand(id) { _ in }
                continue
            }
            let record = PluginRecord(manifest: manifest, phase: .waiting)
            if let reason = fresh.unstartable[id] {
                record.move(to: .failed(byDependency: false), logger: logger)
                record.problem = reason
            } else {
                started += 1
            }
            table.add(record)
        }
        for id in removed {
            let dependents = table.dependents(of: id).map(\.identifier).filter { !removed.contains($0) }
            if !dependents.isEmpty {
                logger.warning("\(id) was removed; \(dependents.sorted().joined(separator: ", ")) still depend\(dependents.count == 1 ? "s" : "") on it and will get unavailable from it")
            }
        }
        stopRemoved(removed)
        table.reorder(fresh.order + previousOrder.filter { fresh.all[$0] == nil })
        logger.notice("rescanned plugin folders: \(started) new, \(changed) changed, \(removed.count) removed")
        startWaitingPlugins()
        outbox.flush()
    }
}
