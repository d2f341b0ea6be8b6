import Bundles
import Logging
import NIOCore
import PluginProtocol
import SupervisorCore

/// An update's files, as its stage (`UpdateStage`, SupervisorCore) carries them: what was staged
/// (the new version swapped in, the previous one kept beside it) and the previous manifest.
/// After an update of a running plugin the previous version stays on disk for `updateGraceSeconds`
/// (SPEC §8, §9): if the new version crashes within that time, it is rolled back on disk and the
/// previous version runs again, with the reason in the log and in `status` (`lastError`). What
/// waited for the plugin meanwhile waits on (Routing/Queueing.swift); only the calls inside the
/// crashed worker fail.
struct UpdateFiles {
    var staged: BundleStore.Staged
    /// The version that served before, and the one the update brings.
    var previous: Manifest
    var new: Manifest
    /// How the log and the answer name the update ("<id> <version> (was <version>)").
    var what: String
}

extension Installs {
    /// Does what an update's stage decided (`UpdateStage.Action`), in order; `done` hears how the
    /// update ended, for the actions that end it.
    func carryOut(_ actions: [UpdateStage<UpdateFiles>.Action], _ record: PluginRecord, _ done: @escaping (Result<String, ErrorBody>) -> Void = { _ in }) {
        let id = record.identifier
        for action in actions {
            switch action {
            case .deletePrevious(let files):
                store.finish(files.staged)
                logger.info("\(id): the previous version (\(files.previous.version)) is deleted", metadata: ["plugin": "\(id)"])
            case .startBeside:
                guard case .beside(let files) = record.update else { continue }
                effects.post(.startBeside(record, files.new) { [self] problem in
                    carryOut(record.update.verdict(problem, now: .now, graceSeconds: config.updateGraceSeconds), record, done)
                })
            case .stopAndStart:
                guard case .stopAndStart(let files) = record.update else { continue }
                record.startedForUpdate = record.phase == .inactive
                let begin: () -> Void = { [self] in
                    record.manifest = files.new
                    record.installAwaitsVerdict = true
                    // A plugin that was inactive is tried, not restarted: nothing of it ran.
                    effects.post(.startAgain(record, counted: !record.startedForUpdate, trigger: "update") { [self] problem in
                        record.installAwaitsVerdict = false
                        carryOut(record.update.verdict(problem, now: .now, graceSeconds: config.updateGraceSeconds), record, done)
                        if problem == nil { backToInactive(record, startedFor: record.startedForUpdate) }
                    })
                }
                if record.instance != nil { effects.post(.stopPlugin(record, then: begin)) } else { begin() }
            case .keepPrevious(let until):
                let seconds = config.updateGraceSeconds
                record.graceTimer?.cancel()
                record.graceTimer = loop.assumeIsolated().scheduleTask(deadline: until.deadline) { [self] in
                    record.graceTimer = nil
                    carryOut(record.update.endGrace(), record)
                }
                if case .grace(let files, _) = record.update {
                    // What went wrong before (an earlier update rolled back, say) was the other version's.
                    record.lastError = nil
                    logger.notice("installed \(files.what); the previous version is kept for \(seconds) s in case the new one crashes",
                                  metadata: ["plugin": "\(id)"])
                    done(.success(files.what))
                }
            case .rollBack(let files, let problem, let how):
                do throws(InstallError) { try store.rollBack(files.staged) } catch {
                    done(.failure(InstallError(.fileSystem, "the new version failed (\(problem)) and rolling back failed: \(error)").body))
                    continue
                }
                let old = files.previous
                logger.error("\(id) \(files.staged.version) failed to start (\(problem)); rolled back to \(old.version)")
                switch how {
                case .beside:
                    // The old worker serves on; if it crashed meanwhile, the old version starts again.
                    if record.instance == nil, record.phase == .restarting, table[id] === record {
                        effects.post(.startAgain(record) { [self] problem in
                            if let problem { logger.error("\(id) \(old.version) did not start again: \(problem)", metadata: ["plugin": "\(id)"]) }
                        })
                    }
                case .stopAndStart:
                    record.manifest = old
                    // Said as the update's failure, not the plugin's ("failed to start" alone
                    // would read as if the version back in place did not).
                    record.lastError = "the update to \(files.staged.version) was rolled back to \(old.version): it failed to start (\(problem))"
                    let wasInactive = record.startedForUpdate
                    let then: (String?) -> Void = { [self] problem in
                        if problem == nil { backToInactive(record, startedFor: wasInactive) }
                    }
                    // Put back on a plugin that was inactive (the new version never started): no restart either.
                    if wasInactive, record.instance == nil {
                        effects.post(.startAgain(record, counted: false, done: then))
                    } else {
                        effects.post(.restart(id, done: then))
                    }
                }
                done(.failure(InstallError(.loadFailed, "\(id) \(files.staged.version) failed to start: \(problem); rolled back to \(old.version)").body))
            case .rollBackAfterCrash:
                // Handed back by `rollBackWithinGrace`, which the lifecycle asks.
                break
            }
        }
        if !record.update.keepsPrevious { record.graceTimer?.cancel(); record.graceTimer = nil }
    }

    /// The grace period is over early (another install, an uninstall or the shutdown comes first):
    /// the previous version is deleted.
    func endGrace(_ record: PluginRecord) {
        carryOut(record.update.endGrace(), record)
    }

    /// The new version crashed: within its grace period the previous one goes back on disk (the
    /// caller starts it). Returns false when there is no grace period running, or the files could
    /// not be put back (the restart policy decides, as usual).
    func rollBackWithinGrace(_ record: PluginRecord, crash described: String) -> Bool {
        for action in record.update.crashed(described, now: .now) {
            guard case .rollBackAfterCrash(let files, _) = action else { continue }
            record.graceTimer?.cancel()
            record.graceTimer = nil
            let id = record.identifier
            let failed = record.manifest.version
            do throws(InstallError) { try store.rollBack(files.staged) } catch {
                logger.error("\(id) \(failed) crashed within its update's grace period (\(described)), and rolling back failed: \(error)",
                             metadata: ["plugin": "\(id)"])
                return false
            }
            record.manifest = files.previous
            record.lastError = "the update to \(failed) was rolled back to \(files.previous.version): it crashed within \(config.updateGraceSeconds) s (\(described))"
            logger.error("\(id) \(failed) crashed within \(config.updateGraceSeconds) s of its update (\(described)); rolled back to \(files.previous.version)",
                         metadata: ["plugin": "\(id)"])
            shared.metrics.installed(outcome: "rolledBack")
            return true
        }
        return false
    }
}
