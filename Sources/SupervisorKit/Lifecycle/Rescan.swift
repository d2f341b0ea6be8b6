import Bundles
import Logging
import NIOCore
import PluginProtocol
import Protocol
import SupervisorCore

extension Lifecycle {
    /// SIGHUP and `supervisor reload`: systemd hears RELOADING=1, the folders are rescanned, and once
    /// nothing the rescan started is still starting, READY=1; `done` gets the summary then (or why
    /// there was no reload).
    func reload(_ done: @escaping (Result<ReloadSummary, ErrorBody>) -> Void) {
        loop.preconditionInEventLoop()
        guard !isShuttingDown else { return done(.failure(ErrorBody(.unavailable, "the supervisor is shutting down"))) }
        shared.systemd.reloadBegan()
        let comingUpBefore = Set(table.all.lazy.filter { ReloadWaits<ReloadUnderWay>.holdsBack($0.phase) }.map(\.identifier))
        let found = rescan()
        // Settled when nothing the rescan set coming up or on its way is still so
        // (`settleReloads`, after every phase change), or at this deadline.
        let comingUp = Set(table.all.lazy.filter { ReloadWaits<ReloadUnderWay>.holdsBack($0.phase) }.map(\.identifier))
            .subtracting(comingUpBefore)
        let until = Instant.now.adding(milliseconds: config.startupTimeoutMs + 5_000)
        let deadline = loop.assumeIsolated().scheduleTask(deadline: until.deadline) { [self] in settleReloads() }
        reloads.began(ReloadUnderWay(found: found, deadline: deadline, done: done), until: until, comingUp: comingUp)
        settleReloads()
    }

    /// Answers the reloads that may be answered now (`ReloadWaits.due`, SupervisorCore), with the
    /// counts as things stand.
    func settleReloads() {
        guard !reloads.isEmpty else { return }
        let due = reloads.due(now: .now, shuttingDown: isShuttingDown) { table[$0]?.phase }
        guard !due.isEmpty else { return }
        let running = table.all.filter { $0.phase == .running }.count
        let failed = table.all.filter { $0.phase.isFailed }.count
        for reload in due {
            reload.deadline.cancel()
            shared.systemd.reloadEnded()
            var answer = reload.found
            answer.running = running
            answer.failed = failed
            reload.done(.success(answer))
        }
    }

    /// Moves `record` to `next` (a move the phase table refuses is a bug: logged, refused), and
    /// settles the reloads that waited for it.
    @discardableResult
    func move(_ record: PluginRecord, to next: PluginPhase) -> Bool {
        defer { settleReloads() }
        return record.move(to: next, logger: logger)
    }

    /// `existing` has `manifest` from now on (its bundle as a rescan read it, startable): what the
    /// manifest notes is warned of, and no reason of an earlier rescan's is shown any more.
    private func takeUp(_ manifest: Manifest, for existing: PluginRecord) {
        for note in manifest.notes { logger.warning("\(note)", metadata: ["plugin": "\(existing.identifier)"]) }
        existing.manifest = manifest
        existing.bundleProblem = nil
    }

    /// Reads the plugin folders again. New plugins start; removed ones stop (dependents
    /// first); a plugin whose manifest or library changed on disk (an offline install, a rebuilt
    /// library) is restarted on its new bundle. Unrelated plugins are not touched.
    @discardableResult
    func rescan() -> ReloadSummary {
        loop.preconditionInEventLoop()
        guard !isShuttingDown else { return ReloadSummary() }
        let fresh = PluginCatalog(directories: config.pluginDirectories, known: table.all.map(\.manifest))
        for problem in fresh.problems { logger.error("\(problem)") }
        let previous = table.catalog
        table.catalog = fresh
        var known: [String: RescanPlan.Known] = [:]
        for record in table.all {
            let isDown = record.phase.isFailed || record.phase == .stopped
            known[record.identifier] = .init(fingerprint: record.manifest.fingerprint, bundle: record.manifest.bundle,
                                             installUnderWay: record.successor != nil || record.installAwaitsVerdict || record.uninstalling,
                                             isRunning: record.phase == .running, isInactive: record.phase == .inactive,
                                             isDown: isDown,
                                             startsOnCall: config.activation(of: record.manifest) == .onCall, hasWorker: !record.workers.isEmpty,
                                             holdsBackDependents: isDown
                                                && table.dependents(of: record.identifier).contains { $0.phase == .failed(byDependency: true) },
                                             keptReason: record.bundleProblem, removal: record.removal?.asRescanReadsIt ?? .none)
        }
        let plan = RescanPlan(known: known, before: previous, now: fresh) { [config] in config.activation(of: $0) == .onCall }
        let removed = plan.removed
        let previousOrder = table.order
        var started = 0, changed = 0, forgotten = removed.count
        for (id, step) in plan.steps {
            switch step {
            case .leftToItsInstall:
                logger.info("\(id) is being updated; the rescan leaves it to the update", metadata: ["plugin": "\(id)"])
            case .refuse(let manifest, let reason, let itsOwn):
                guard let existing = table[id] else { continue }
                if itsOwn { changed += 1 }
                existing.manifest = manifest
                existing.bundleProblem = nil
                logger.error(itsOwn ? "\(id) changed on disk and cannot start: \(reason)" : "\(id) cannot start any more: \(reason)")
                reloads.stopping([id])
                stopPlugin(existing) { [self] in
                    reloads.stopped(id)
                    move(existing, to: .failed(byDependency: false))
                    existing.problem = reason
                    events.failed(existing)
                    // Its dependents still coming up fail by it now (they waited for it to run).
                    startWaitingPlugins()
                }
            case .keep(let reason, let itsOwn):
                guard let existing = table[id] else { continue }
                if itsOwn { changed += 1 }
                // Shown until the bundle is fixed, whatever becomes of its worker (a crash's
                // restart runs what it loaded, and clears `problem`).
                existing.bundleProblem = reason
                existing.problem = reason
                logger.error(itsOwn ? "\(id) changed on disk and cannot start as its bundle is now: \(reason); its running worker goes on with what it loaded"
                                    : "\(id) could not start again as the plugins are now: \(reason); its running worker goes on with what it loaded",
                             metadata: ["plugin": "\(id)"])
            case .cleared:
                guard let existing = table[id] else { continue }
                existing.problem = nil
                existing.bundleProblem = nil
                logger.notice("\(id) is no longer refused (\(previous.unstartable[id] ?? "")); it runs already", metadata: ["plugin": "\(id)"])
            case .restart(let manifest, let cured):
                guard let existing = table[id] else { continue }
                changed += 1
                takeUp(manifest, for: existing)
                logger.notice(cured ? "\(id) is no longer refused (\(previous.unstartable[id] ?? "")): starting it"
                                    : "\(id) changed on disk (now \(manifest.version)): restarting it")
                // The reload is answered once it runs again (or failed).
                reloads.restarting(id)
                restartCommand(id) { [self] _ in
                    reloads.restarted(id)
                    settleReloads()
                }
            case .awaitNeed(let manifest, let cured):
                guard let existing = table[id] else { continue }
                changed += 1
                takeUp(manifest, for: existing)
                // Nothing of it runs: it loads the bundle as it is now when it is next needed (SPEC §16).
                effects.now(.life(existing, existing.life.awaitNeed()))
                logger.notice(cured ? "\(id) is no longer refused (\(previous.unstartable[id] ?? "")); inactive, it starts when it is needed"
                                    : "\(id) changed on disk (now \(manifest.version)); inactive, it loads that when it is next needed")
            case .add(let manifest, let refused):
                if refused == nil { started += 1 }
                addFound(manifest, refused: refused)
            case .addAfterItsRemoval(let manifest, let refused, let again):
                guard let existing = table[id] else { continue }
                existing.removal = .addingBack(manifest, refused: refused)
                // Said once; a later rescan only reads it again.
                if again { continue }
                if refused == nil { started += 1 }
                // The reload is answered once the plugin added again runs (or failed).
                reloads.restarting(id)
                logger.notice("\(id) is back in the plugin folders while its removal is under way; it is added again once it has stopped",
                              metadata: ["plugin": "\(id)"])
            case .forgetAfterItsRemoval:
                guard let existing = table[id] else { continue }
                forgotten += 1
                existing.removal = .forgetting
                reloads.restarted(id)
            case .remove:
                break
            }
        }
        for id in removed {
            let dependents = table.dependents(of: id).map(\.identifier).filter { !removed.contains($0) }
            if !dependents.isEmpty {
                logger.warning("\(id) was removed; \(dependents.sorted().joined(separator: ", ")) still depend\(dependents.count == 1 ? "s" : "") on it and will get notFound from it until it is installed again")
            }
        }
        stopRemoved(removed)
        table.reorder(fresh.order + previousOrder.filter { fresh.all[$0] == nil })
        logger.notice("rescanned plugin folders: \(started) new, \(changed) changed, \(forgotten) removed")
        startWaitingPlugins()
        var summary = ReloadSummary()
        (summary.new, summary.changed, summary.removed) = (started, changed, forgotten)
        return summary
    }

    /// A plugin a rescan found, as `manifest` (`refused`: why it cannot start), joins the table,
    /// in the place of a record of the same name (one that has stopped for its removal); it starts
    /// with the next `startWaitingPlugins`.
    @discardableResult
    func addFound(_ manifest: Manifest, refused: String?) -> PluginRecord {
        let id = manifest.identifier
        for note in manifest.notes { logger.warning("\(note)", metadata: ["plugin": "\(id)"]) }
        let record = PluginRecord(manifest: manifest, phase: config.initialPhase(of: manifest))
        if let refused {
            logger.error("\(refused); \(id) will not start")
            move(record, to: .failed(byDependency: false))
            record.problem = refused
        }
        table.add(record)
        // Found refused: the programs that listen hear it failed, as for one that fails to load.
        if refused != nil { events.failed(record) }
        return record
    }

    /// `record` has stopped for its removal, and a rescan found its bundle again meanwhile: a new
    /// record takes its place, and the requests that waited for the old one wait for it. The reload
    /// that found it is answered once it runs (or failed, or waits to be needed).
    func addBack(after record: PluginRecord, _ manifest: Manifest, refused: String?) {
        let id = record.identifier
        let fresh = addFound(manifest, refused: refused)
        swap(&fresh.waiting, &record.waiting)
        logger.notice("\(id) was found again in the plugin folders while it was being removed: added again", metadata: ["plugin": "\(id)"])
        if fresh.phase == .inactive, !fresh.waiting.isEmpty {
            // Calls waited for it: they are its first need (SPEC §16).
            activate(fresh, by: "a call that waited for it")
        }
        if fresh.phase.isStarting || fresh.life.activating {
            fresh.startWaiters.append { [self] _ in
                reloads.restarted(id)
                settleReloads()
            }
        } else {
            reloads.restarted(id)
        }
        startWaitingPlugins()
    }
}

/// A reload waiting for what it started to settle.
struct ReloadUnderWay {
    var found: ReloadSummary
    /// Its deadline's timer, cancelled when it is answered.
    var deadline: Scheduled<Void>
    var done: (Result<ReloadSummary, ErrorBody>) -> Void
}
