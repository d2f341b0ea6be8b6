import Bundles
import Logging
import NIOCore
import PluginProtocol
import SupervisorCore

/// A new version of a running plugin coming up beside the worker that serves it (SPEC §8: an update
/// starts the new version before the old one stops and routes to it once it is running).
///
///     calls ──► old worker (running) ─────────────┐ drains its calls, then willTerminate
///               new worker: spawn → hello → startup answered ──► calls ──► new worker
///
/// Until the new worker answers `startup`, the old one serves every call; the switch is one
/// assignment on the event loop, so no call waits for the new worker to start. If the new worker
/// ends, is refused `startup` or times out first, the old one never noticed: the update fails and
/// whoever asked for it hears why. Owned by the event loop, like the record that holds it.
struct Successor {
    var instance: WorkerInstance
    var library: String
    var variant: String?
    /// Hears nil once it serves the plugin, or why it does not.
    var done: (String?) -> Void
}

extension Lifecycle {
    /// Starts `manifest`'s worker beside `record`'s running one; `done` hears nil once it has taken
    /// over, or why it did not (the old worker serves on, untouched).
    func startBeside(_ record: PluginRecord, _ manifest: Manifest, _ done: @escaping (String?) -> Void) {
        loop.preconditionInEventLoop()
        guard shared.canStartBeside(record, manifest) else { return done("\(record.identifier) is not running") }
        // A kept standby is of the old version: the new one keeps its own once it serves.
        discardStandby(record, because: "\(record.identifier) is being updated")
        switch spawnWorker(manifest, temp: freeTemporaryFolder(record)) {
        case .failure(let failure):
            done(failure.reason)
        case .success(let spawned):
            record.next = .successor(Successor(instance: spawned.instance, library: spawned.library, variant: spawned.variant, done: done))
            logger.info("starting \(record.identifier) \(manifest.version) beside \(record.manifest.version) (pid \(spawned.instance.pid))",
                        metadata: ["plugin": "\(record.identifier)", "pid": "\(spawned.instance.pid)"])
        }
    }

    /// The new version answered `startup`: it serves from now on, and the old worker drains.
    func takeOver(_ record: PluginRecord) {
        guard let successor = record.successor, successor.instance.move(to: .running, logger: logger) else { return }
        let new = successor.instance
        record.next = .none
        new.startSettled()
        new.timings["startupUs"] = Int((NIODeadline.now() - new.spawnedAt).nanoseconds / 1000)
        let previous = record.manifest.version
        let old = record.instance
        record.manifest = new.manifest
        record.library = successor.library
        record.variant = successor.variant
        record.instance = new
        effects.now(.life(record, record.life.updateTookOver(record.identifier, from: previous.description, to: new.manifest.version.description)))
        if let old, !old.phase.hasExited { retire(record, old) }
        successor.done(nil)
        servesAgain(record, restarted: true)
    }

    /// A worker that no longer serves (the old one after the switch, an abandoned new one, a
    /// discarded standby): it takes no new call, finishes those it has (the drain), then gets
    /// `willTerminate` (one that never said hello is killed at once). It stays among the
    /// plugin's workers until it has ended, so the shutdown waits for it too.
    func retire(_ record: PluginRecord, _ worker: WorkerInstance, then done: @escaping () -> Void = {}) {
        record.retiring.append(worker)
        stopWorker(record, worker) { [self, weak record] in
            record?.retiring.removeAll { $0 === worker }
            done()
            // At shutdown the last worker to end lets the supervisor finish.
            if isShuttingDown { stopNextWave() }
        }
    }

    /// The new version's worker ended before it took over (`described` says how): the update fails,
    /// and the old worker, which serves on, is not touched. If the old one has ended meanwhile, the
    /// update's owner decides what runs next (Installs rolls back and starts the old version again).
    func successorEnded(_ record: PluginRecord, _ instance: WorkerInstance, _ described: String) {
        guard let successor = record.successor, successor.instance === instance else { return }
        record.next = .none
        logger.error("\(record.identifier) \(instance.manifest.version) did not take over: \(described); \(record.manifest.version) serves on",
                     metadata: ["plugin": "\(record.identifier)", "pid": "\(instance.pid)"])
        successor.done(described)
        keepStandbyLater(record)
    }

    /// Stops a new version coming up beside the old one (the plugin is being stopped or restarted,
    /// or the supervisor shuts down). Its update hears `reason` at once, so the old files are back
    /// before anything starts the old version again; the worker, its library long loaded, ends
    /// meanwhile.
    func abandonSuccessor(_ record: PluginRecord, because reason: String) {
        guard let successor = record.successor else { return }
        record.next = .none
        logger.notice("\(record.identifier) \(successor.instance.manifest.version) is stopped before it took over: \(reason)",
                      metadata: ["plugin": "\(record.identifier)"])
        retire(record, successor.instance)
        successor.done(reason)
    }
}

extension Shared {
    /// Whether an update of `record` to `manifest` can start beside its running worker (and take
    /// over with no call dropped): it runs, nothing else is next for it (a kept standby gives way),
    /// and the new version's dependencies run. Otherwise it is stopped and started as the new version.
    func canStartBeside(_ record: PluginRecord, _ manifest: Manifest) -> Bool {
        let next: UpdateRule.Next = record.next.isNone ? .none : record.standby?.isKept == true ? .keptStandby : .other
        return UpdateRule.canStartBeside(shuttingDown: isShuttingDown, phase: record.phase, workerRunning: record.instance?.phase == .running,
                                         next: next, newDependenciesRunning: table.dependenciesRunning(manifest))
    }
}
