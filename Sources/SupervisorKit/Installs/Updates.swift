import Bundles
import LinuxSupport
import Logging
import NIOCore
import PluginProtocol
import Protocol
import SupervisorCore

extension Installs {
    /// Control request `update` (`check`: only list what is newer).
    func updateCommand(_ origin: ReplyOrigin, options: InstallOptions) {
        guard config.updatesEnabled else { return outbox.answer(origin, error: ErrorBody(.denied, "updates are switched off in the config (updates: false)")) }
        guard let url = catalogURL else {
            return outbox.answer(origin, error: ErrorBody(.badRequest, "no catalog is configured (config key catalog)"))
        }
        let request = catalogRequest(url)
        let ticket = unanswered.add(origin, "the update")
        let back = handOff((self, origin))
        offLoop { runner in
            let loaded: CatalogLoaded
            do throws(InstallError) { loaded = try runner.loadCatalog(request) } catch {
                back.execute { installs, _ in installs.unanswered.take(ticket).map { installs.outbox.answer($0, error: error.body) } }
                return
            }
            back.execute { installs, origin in
                guard installs.unanswered.waits(ticket) else { return }
                installs.offerUpdates(loaded, origin: origin, ticket: ticket, checkOnly: options.check)
            }
        }
    }

    private func offerUpdates(_ loaded: CatalogLoaded, origin: ReplyOrigin, ticket: UInt64, checkOnly: Bool) {
        var updates: [(CatalogEntry, UpdateCheck.Available)] = []
        for entry in CatalogCache.newest(loaded.entries) {
            guard let record = table[entry.identifier], let v = SemanticVersion(entry.version), v > record.manifest.version,
                  isInstalledHere(record) else { continue }
            updates.append((entry, UpdateCheck.Available(identifier: entry.identifier, installed: record.manifest.version.description, available: entry.version)))
        }
        // Dependencies before their dependents (the start order), whatever order the catalog lists
        // them in: a dependent's new version that needs its dependency's new one then finds it.
        updates = table.inStartOrder(updates) { $0.0.identifier }
        if checkOnly {
            guard let origin = unanswered.take(ticket) else { return }
            outbox.respond(origin) { try ProtocolJSON.encode(UpdateCheck(catalog: loaded.source, updates: updates.map(\.1))) }
            return
        }
        applyUpdates(updates.map(\.0), origin: origin, ticket: ticket, done: [], failed: [:])
    }

    /// Installs catalog entries one after the other, then answers; a stop that answered it first
    /// ends it.
    private func applyUpdates(_ remaining: [CatalogEntry], origin: ReplyOrigin, ticket: UInt64, done: [String], failed: [String: String]) {
        guard unanswered.waits(ticket) else { return }
        // A stop under way: the rest is not begun (each would download for nothing).
        if isShuttingDown, !remaining.isEmpty {
            var failed = failed
            for entry in remaining { failed[entry.identifier] = "not updated: the supervisor is stopping" }
            return applyUpdates([], origin: origin, ticket: ticket, done: done, failed: failed)
        }
        guard let entry = remaining.first else {
            guard let origin = unanswered.take(ticket) else { return }
            outbox.respond(origin) { try ProtocolJSON.encode(UpdateOutcome(updated: done, failed: failed)) }
            return
        }
        outbox.sendProgress(origin, stage: "update", done: Int64(done.count + failed.count), total: Int64(done.count + failed.count + remaining.count),
                            message: "\(entry.identifier) \(entry.version)")
        install(source: entry.url, entry: entry, options: InstallOptions(), origin: origin, updating: true, ticket: ticket) { [self] result in
            var done = done, failed = failed
            switch result {
            case .success(let text):
                done.append(text)
                unanswered.did(text, for: ticket)
            case .failure(let error): failed[entry.identifier] = error.message
            }
            applyUpdates(Array(remaining.dropFirst()), origin: origin, ticket: ticket, done: done, failed: failed)
        }
    }

    /// Control request `uninstall`: stop the plugin, remove its bundle from `<home>/plugins`.
    func uninstallCommand(_ origin: ReplyOrigin, identifier: String) {
        guard let record = table[identifier] else { return outbox.answer(origin, error: ErrorBody(.notFound, "no plugin \(identifier) is installed")) }
        guard isInstalledHere(record) else {
            return outbox.answer(origin, error: ErrorBody(.denied, "\(identifier) is not installed in \(pluginsFolder) (it comes from \(record.manifest.bundle)); remove its bundle there"))
        }
        guard !record.update.isStarting, !record.installAwaitsVerdict else {
            return outbox.answer(origin, error: InstallError(.conflict, "\(identifier) is being updated; try again once that is done").body)
        }
        guard !record.uninstalling else { return outbox.answer(origin, error: InstallError(.conflict, "\(identifier) is being uninstalled").body) }
        if let conflict = record.removalConflict { return outbox.answer(origin, error: InstallError(.conflict, conflict).body) }
        let needed = table.dependents(of: identifier).map(\.identifier).sorted()
        guard needed.isEmpty else {
            return outbox.answer(origin, error: ErrorBody(.denied, "\(identifier) is needed by \(needed.joined(separator: ", ")); uninstall those first"))
        }
        // Its bundle leaves the plugins folder first: one that cannot (a read-only or immutable
        // folder) is refused with nothing changed, the plugin still running.
        let folder = String(record.manifest.bundle.split(separator: "/").last ?? "")
        let removed: String
        do throws(InstallError) { removed = try store.takeOut(folder) } catch {
            return outbox.answer(origin, error: error.body)
        }
        record.uninstalling = true
        endGrace(record)
        record.cancelRestart()
        // What waits for it meanwhile is answered with the reason (`<id> is stopped: being uninstalled`).
        record.problem = "being uninstalled"
        effects.post(.move(record, .stopped))
        effects.post(.stopPlugin(record) { [self] in
            BundleStore.removeTree(removed)
            effects.post(.forget(record, because: "\(record.identifier) was uninstalled"))
            logger.notice("uninstalled \(identifier) \(record.manifest.version)")
            events.uninstalled(identifier, version: record.manifest.version.description)
            outbox.respond(origin) { try ProtocolJSON.encode(["uninstalled": "\(identifier) \(record.manifest.version)"]) }
        })
    }
}

extension Installs {
    /// Once every plugin has started: each update that had not ended when the supervisor last
    /// stopped (its new version starting, or within its grace period) is applied again, as an
    /// install of it would be, one after the other, dependencies first; its previous version,
    /// back in place, serves meanwhile and stays if the new one fails again. A shutdown leaves
    /// the rest marked for the next start.
    func resumeInterruptedUpdates() {
        let updates = table.inStartOrder(interrupted, by: \.identifier)
        interrupted = []
        resume(updates[...])
    }

    private func resume(_ updates: ArraySlice<BundleStore.Staged>) {
        guard !isShuttingDown, let staged = updates.first else { return }
        let id = staged.identifier
        let previous = staged.previous ?? "?"
        guard let record = table[id], "\(record.manifest.version)" == previous else {
            store.finish(staged)
            logger.warning("\(id): its update to \(staged.version) had not ended when the supervisor stopped, and \(previous) is no longer what is installed; the update is dropped",
                           metadata: ["plugin": "\(id)"])
            return resume(updates.dropFirst())
        }
        logger.warning("\(id): its update to \(staged.version) had not ended when the supervisor stopped; \(previous) was put back and runs, and \(staged.version) is tried again",
                       metadata: ["plugin": "\(id)"])
        apply(staged, counted { [self] result in
            switch result {
            case .success(let what):
                logger.notice("\(id): the interrupted update is done: \(what)", metadata: ["plugin": "\(id)"])
            case .failure(let error):
                logger.error("\(id): the interrupted update to \(staged.version), tried again, failed: \(error.message)", metadata: ["plugin": "\(id)"])
            }
            resume(updates.dropFirst())
        })
    }
}
