import LinuxSupport
import Logging
import NIOCore
import PluginProtocol
import SupervisorCore

/// A plugin's next worker, made before it is needed: on a crash's notice, before the crashed worker
/// has been reaped (`standbyWorkers: "on-crash"`, the default), or kept beside the running worker
/// from the start (`"always"`).
///
///     worker A crashes ─► its notice or EOF ──► standby B spawned, sandboxed, waits (no plugin code yet)
///     A's kernel exit (~1.2 ms: address space, mount namespace, /proc) ─► A reaped, exit classified
///         restart at once ─► B told `load` ─► hello ─► startup ─► serving
///         anything else   ─► B killed (it never ran plugin code)
///
/// The reaped exit decides, as it always did (an OOM kill from the cgroup, a library written over,
/// a rollback within an update's grace, the restart policy); the standby only takes the spawn and
/// the sandbox (~3 ms) off the restart's path. It is spawned only when the restart is likely to be
/// immediate (the first in the window, the policy restarts, nothing else is changing the plugin),
/// at most one per plugin, and is discarded if not taken within the start-up timeout.
///
/// Kept (`"always"`): spawned once the supervisor is ready for each running plugin, and again after
/// each restart or update has settled, it waits with no deadline. A crash's restart then waits for
/// the crashed worker's reap and the plugin's own load only: no spawn, no sandbox, and no start
/// competing with the crashed worker's exit for the CPUs. It is discarded when the plugin is
/// stopped, updated, fails, or is restarted after a delay (a fresh one follows when it runs again),
/// and before an upgrade in place hands over (the new binary makes its own). The price: every
/// running plugin has a second sandboxed process (no plugin code in it) and control group.
/// Owned by the event loop, like the record that holds it.
struct Standby {
    var instance: WorkerInstance
    var library: String
    var variant: String?
    var occasion: Occasion

    enum Occasion {
        /// Spawned on a crash's notice; `expiry` discards it if nothing took it in time (its worker
        /// never ended, say).
        case crash(expiry: Scheduled<Void>)
        /// Kept beside the running worker until a restart takes it.
        case kept
    }

    var isKept: Bool { if case .kept = occasion { true } else { false } }

    /// Its deadline, if it has one, is called off.
    func cancelExpiry() {
        if case .crash(let expiry) = occasion { expiry.cancel() }
    }
}

extension Lifecycle {
    /// `instance`, which serves `record`, is ending without being asked (it said why, or its socket
    /// closed): if the restart that follows will be immediate, its successor is spawned now.
    func prepareStandby(after instance: WorkerInstance) {
        loop.preconditionInEventLoop()
        guard config.standbyWorkers != .never else { return }
        // The serving worker, ending by itself (not reaped, not being stopped).
        guard let record = table.record(servedBy: instance),
              !instance.phase.hasExited, !instance.phase.stopRequested else { return }
        var context = circumstances(record)
        // Any update grace, open or not yet ended, rules out a standby (a crash may roll back).
        context.updateGraceOpen = record.update.keepsPrevious
        guard record.life.wantsStandby(context, workerRan: instance.everRan, permanentCause: instance.killReason?.reason.isPermanent ?? false,
                                       nothingNext: record.next.isNone, dependenciesRunning: table.dependenciesRunning(record),
                                       restartPolicy: restartPolicy, now: .now) else { return }
        let spawned: SpawnedWorker
        switch spawnWorker(record.manifest, temp: freeTemporaryFolder(record), standby: true) {
        case .success(let s): spawned = s
        case .failure(let failure):
            // The restart spawns as usual, and says why if it fails again.
            return logger.debug("no standby worker: \(failure.reason)", metadata: ["plugin": "\(record.identifier)"])
        }
        let timeoutMs = startupTimeout(record.manifest)
        let expiry = loop.assumeIsolated().scheduleTask(in: .milliseconds(Int64(timeoutMs))) { [self, weak record] in
            if let record { discardStandby(record, because: "not needed within \(timeoutMs) ms") }
        }
        record.next = .standby(Standby(instance: spawned.instance, library: spawned.library, variant: spawned.variant, occasion: .crash(expiry: expiry)))
        logger.debug("standby worker spawned", metadata: ["plugin": "\(record.identifier)", "pid": "\(spawned.instance.pid)",
                                                          "replacing": "\(instance.pid)"])
    }

    /// How long after a plugin starts serving its kept standby is spawned, and how far apart the
    /// standbys of many plugins are: a standby's spawn and sandbox take a CPU for ~3 ms, which must
    /// not be in the way of the first calls of a worker that has just started (after a restart,
    /// the calls that waited for it). Measured: spawned at once, it added ~2.3 ms to crash →
    /// serving on this 2-CPU machine (docs/benchmarks.md). A crash meanwhile is no loss: the
    /// standby spawned on its notice does the same, and a second crash within the restart window
    /// waits for its backoff anyway.
    static let keptStandbyDelay = TimeAmount.milliseconds(100)
    static let keptStandbySpacing = TimeAmount.milliseconds(5)

    /// With `standbyWorkers: "always"`: a standby, one after the other, for each running plugin
    /// that has none and may have one. Once the supervisor is ready, and after an upgrade in place.
    func keepStandbys() {
        for (i, record) in table.inOrder.enumerated() {
            keepStandbyLater(record, in: Self.keptStandbyDelay + Self.keptStandbySpacing * Int64(i))
        }
    }

    /// `keepStandby` after `delay`, if `record` is still the plugin's, through the engine (which
    /// holds it back during an upgrade's quiet phase and handover: a standby spawned then would be
    /// among the workers the next binary is handed).
    func keepStandbyLater(_ record: PluginRecord, in delay: TimeAmount = Lifecycle.keptStandbyDelay) {
        guard config.standbyWorkers == .always else { return }
        loop.assumeIsolated().scheduleTask(in: delay) { [self, weak record] in
            if let record, table[record.identifier] === record { effects.post(.keepStandby(record)) }
        }
    }

    /// With `standbyWorkers: "always"`: spawns `record`'s kept standby if it runs, settled (no
    /// update's new version, install or restart under way), and the supervisor's first start is
    /// over (the standbys do not slow it).
    func keepStandby(_ record: PluginRecord) {
        loop.preconditionInEventLoop()
        guard config.standbyWorkers == .always, phase == .launched, let current = record.instance, current.phase == .running,
              record.life.wantsKeptStandby(circumstances(record), nothingNext: record.next.isNone) else { return }
        switch spawnWorker(record.manifest, temp: freeTemporaryFolder(record), standby: true) {
        case .success(let spawned):
            record.next = .standby(Standby(instance: spawned.instance, library: spawned.library, variant: spawned.variant, occasion: .kept))
            logger.debug("standby worker kept", metadata: ["plugin": "\(record.identifier)", "pid": "\(spawned.instance.pid)"])
        case .failure(let failure):
            // Its restarts spawn as usual; the next start tries again.
            logger.warning("no standby worker kept: \(failure.reason)", metadata: ["plugin": "\(record.identifier)"])
        }
    }

    /// Ends every kept standby (before an upgrade in place hands over: the next binary keeps its own).
    func discardKeptStandbys(because reason: String) {
        for record in table.inOrder where record.standby?.isKept == true { discardStandby(record, because: reason) }
    }

    /// Makes `record`'s standby its worker and tells it to load the plugin: the restart's spawn.
    /// False if there is none fit to take (the restart then spawns a worker as usual).
    func adoptStandby(_ record: PluginRecord) -> Bool {
        guard let standby = record.standby else { return false }
        let instance = standby.instance
        // Spawned for this very bundle (a rescan meanwhile may have read a changed manifest: its
        // fingerprint covers the manifest's bytes and the library's), and still waiting.
        guard record.instance == nil, instance.phase == .spawned, instance.killReason == nil,
              instance.manifest.bundle == record.manifest.bundle, instance.manifest.fingerprint == record.manifest.fingerprint else {
            discardStandby(record, because: "no longer fit for the restart")
            return false
        }
        standby.cancelExpiry()
        record.next = .none
        // The library may have been written over since its spawn (a kept one may wait for hours):
        // what a crash of this worker is compared with (`libraryReplaced`) is the file it loads now.
        if let library = instance.library { instance.library = (library.path, FileStamp(path: library.path)) }
        record.instance = instance
        record.library = standby.library
        record.variant = standby.variant
        move(record, to: .restarting)
        armStartupDeadline(instance)
        // Spawn → `load` sent, beside `helloUs` and `startupUs` (`status`'s timings).
        instance.timings["loadOrderUs"] = Int((NIODeadline.now() - instance.spawnedAt).nanoseconds / 1000)
        instance.loadOrdered = true
        sendLoad(instance)
        logger.debug("standby worker takes the restart", metadata: ["plugin": "\(record.identifier)", "pid": "\(instance.pid)"])
        return true
    }

    /// Sends a standby told to load its `load` frame, once its socket is wired into the loop.
    func sendLoad(_ instance: WorkerInstance) {
        guard instance.loadOrdered, let channel = instance.channel else { return }
        instance.loadOrdered = false
        outbox.write([UInt8].frame(body: Frame.loadBody), to: channel)
    }

    /// Ends `record`'s standby, if it has one that was not taken: it never ran plugin code, so it is
    /// killed at once; it stays among the plugin's workers until reaped (a shutdown waits for it).
    func discardStandby(_ record: PluginRecord, because reason: String) {
        guard let standby = record.standby else { return }
        record.next = .none
        standby.cancelExpiry()
        logger.debug("standby worker discarded: \(reason)", metadata: ["plugin": "\(record.identifier)", "pid": "\(standby.instance.pid)"])
        retire(record, standby.instance)
    }
}
