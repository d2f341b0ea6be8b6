import Logging
import NIOCore
import PluginProtocol

/// A crashed plugin's next worker, started before the crashed one has been reaped.
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
/// at most one per plugin, and is discarded if not taken within the start-up timeout. Owned by the
/// event loop, like the record that holds it.
struct Standby {
    var instance: WorkerInstance
    var library: String
    var variant: String?
    /// Discards it if nothing took it in time (its worker never ended, say).
    var expiry: Scheduled<Void>
}

extension Lifecycle {
    /// `instance`, which serves `record`, is ending without being asked (it said why, or its socket
    /// closed): if the restart that follows will be immediate, its successor is spawned now.
    func prepareStandby(after instance: WorkerInstance) {
        loop.preconditionInEventLoop()
        // The serving worker, ending by itself (not reaped, not being stopped).
        guard let record = table[instance.identifier], record.instance === instance,
              !instance.phase.hasExited, !instance.phase.stopRequested else { return }
        var context = circumstances(record)
        // Any update grace, open or not yet ended, rules out a standby (a crash may roll back).
        context.updateGraceOpen = record.updateGrace != nil
        guard record.life.wantsStandby(context, workerRan: instance.everRan, permanentCause: instance.killReason?.reason.isPermanent ?? false,
                                       nothingNext: record.next.isNone, dependenciesRunning: table.dependenciesRunning(record),
                                       restartPolicy: restartPolicy, now: .now()) else { return }
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
        record.next = .standby(Standby(instance: spawned.instance, library: spawned.library, variant: spawned.variant, expiry: expiry))
        logger.debug("standby worker spawned", metadata: ["plugin": "\(record.identifier)", "pid": "\(spawned.instance.pid)",
                                                          "replacing": "\(instance.pid)"])
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
        standby.expiry.cancel()
        record.next = .none
        record.instance = instance
        record.library = standby.library
        record.variant = standby.variant
        move(record, to: .restarting)
        armStartupDeadline(instance)
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
        standby.expiry.cancel()
        logger.debug("standby worker discarded: \(reason)", metadata: ["plugin": "\(record.identifier)", "pid": "\(standby.instance.pid)"])
        retire(record, standby.instance)
    }
}
