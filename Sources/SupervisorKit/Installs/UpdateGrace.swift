import Bundles
import Logging
import NIOCore
import PluginProtocol
import SupervisorCore

/// After an update of a running plugin, the previous version stays on disk for `updateGraceSeconds`
/// (SPEC §8, §9): if the new version crashes within that time, it is rolled back on disk and the
/// previous version runs again, with the reason in the log and in `status` (`lastError`). What
/// waited for the plugin meanwhile waits on (Routing/Queueing.swift); only the calls inside the
/// crashed worker fail.
struct UpdateGrace {
    var staged: BundleStore.Staged
    var previous: Manifest
    var what: String
    var until: Instant
    var timer: Scheduled<Void>?
}

extension Installs {
    /// The new version runs: keep the previous one until the grace period ends.
    func beginGrace(_ record: PluginRecord, staged: BundleStore.Staged, previous: Manifest, what: String) {
        let seconds = config.updateGraceSeconds
        var grace = UpdateGrace(staged: staged, previous: previous, what: what, until: Instant.now.adding(milliseconds: seconds * 1_000))
        grace.timer = loop.assumeIsolated().scheduleTask(in: .seconds(Int64(seconds))) { [self] in endGrace(record) }
        record.updateGrace = grace
        logger.notice("installed \(what); the previous version is kept for \(seconds) s in case the new one crashes",
                      metadata: ["plugin": "\(record.identifier)"])
    }

    /// The grace period is over (or another install, an uninstall or the shutdown comes first): the
    /// previous version is deleted.
    func endGrace(_ record: PluginRecord) {
        guard let grace = record.updateGrace else { return }
        grace.timer?.cancel()
        record.updateGrace = nil
        store.finish(grace.staged)
        logger.info("\(record.identifier): the previous version (\(grace.previous.version)) is deleted", metadata: ["plugin": "\(record.identifier)"])
    }

    /// The new version crashed within its grace period: the previous one goes back on disk (the
    /// caller starts it). Returns false when there is no grace period running, or the files could
    /// not be put back (the restart policy decides, as usual).
    func rollBackWithinGrace(_ record: PluginRecord, crash described: String) -> Bool {
        guard let grace = record.updateGrace, UpdateRule.withinGrace(until: grace.until, now: .now) else { return false }
        grace.timer?.cancel()
        record.updateGrace = nil
        let id = record.identifier
        let failed = record.manifest.version
        do throws(InstallError) { try store.rollBack(grace.staged) } catch {
            logger.error("\(id) \(failed) crashed within its update's grace period (\(described)), and rolling back failed: \(error)",
                         metadata: ["plugin": "\(id)"])
            return false
        }
        record.manifest = grace.previous
        record.lastError = "the update to \(failed) was rolled back to \(grace.previous.version): it crashed within \(config.updateGraceSeconds) s (\(described))"
        logger.error("\(id) \(failed) crashed within \(config.updateGraceSeconds) s of its update (\(described)); rolled back to \(grace.previous.version)",
                     metadata: ["plugin": "\(id)"])
        shared.metrics.installed(outcome: "rolledBack")
        return true
    }
}
