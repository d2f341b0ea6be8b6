import Bundles
import LinuxSupport
import Logging
import NIOCore
import PluginProtocol
#if canImport(Glibc)
import Glibc
#endif

/// Shutdown in reverse dependency order: `willTerminate`, a grace period, then SIGKILL.
extension Supervisor {
    func shutdown(reason: String) {
        guard !shuttingDown else { return }
        shuttingDown = true
        logger.notice("shutting down (\(reason))")
        for record in records.values {
            record.pendingRestart?.cancel()
            if record.state == .waiting || record.state == .restarting, record.instance == nil { record.state = .stopped }
            record.settleWaiters("the supervisor is shutting down")
        }
        stopNextWave()
    }

    /// Stops every plugin that no live plugin depends on; repeats as they stop.
    func stopNextWave() {
        let live = records.values.filter { $0.instance != nil }
        if live.isEmpty { return finish() }
        let needed = Set(live.flatMap(\.dependencyIDs))
        for record in live where !needed.contains(record.identifier) {
            guard let instance = record.instance, !instance.stopRequested else { continue }
            stopPlugin(record) { [self] in stopNextWave() }
        }
    }

    /// Sends `willTerminate`, waits for the answer (up to the grace period), closes the socket so the
    /// worker exits, and kills it if it is still there when the grace period ends.
    func stopPlugin(_ record: PluginRecord, _ done: @escaping () -> Void) {
        guard let instance = record.instance else { done(); return }
        instance.onExit.append(done)
        // Already reaped, not yet finalized: `done` runs when it is (calling it now would loop).
        if instance.exited { return }
        guard !instance.stopRequested else { return }
        instance.stopRequested = true
        let grace = TimeAmount.milliseconds(Int64(config.shutdownGraceMs))
        let hardStop = loop.scheduleTask(in: grace) { [self] in
            if !instance.exited {
                instance.killReason = ("stopped", "did not exit within the \(config.shutdownGraceMs) ms grace period")
                instance.process.signal(SIGKILL)
            }
        }
        instance.onExit.append { hardStop.cancel() }
        if instance.helloReceived, instance.channel != nil {
            sendEvent(record, .willTerminate, timeoutMs: config.shutdownGraceMs) { _ in
                instance.channel?.close(promise: nil)
            }
            flushDirty()
        } else {
            instance.process.signal(SIGKILL)
        }
    }

    func finish() {
        for t in timers { t.cancel() }
        timers = []
        let path = config.socketPath
        let close = controlServer?.close() ?? loop.makeSucceededVoidFuture()
        close.whenComplete { [self] _ in
            unlink(path)
            logger.notice("all plugins stopped; bye")
            finished.succeed(())
        }
    }

    // MARK: Signals

    func handleSignal(_ signal: Int32) {
        switch signal {
        case SIGTERM, SIGINT: shutdown(reason: LifecycleSignals.name(signal))
        case SIGUSR1: broadcastFromSignal(.memoryWarning)
        case SIGTSTP: broadcastFromSignal(.background)
        case SIGCONT: broadcastFromSignal(.foreground)
        case SIGHUP: rescan()
        default: break
        }
    }

    func broadcastFromSignal(_ event: EventName) {
        guard !shuttingDown else { return }
        broadcast(event) { [self] delivered, failed in
            let missing = failed.isEmpty ? "" : "; not by \(failed.keys.sorted().joined(separator: ", "))"
            logger.info("\(event.rawValue) acknowledged by \(delivered.count) plugin(s)\(missing)")
        }
    }

    /// SIGHUP: read the plugin folders again. New plugins start; removed ones stop (dependents
    /// first); a plugin whose manifest or library changed on disk (an offline install, a rebuilt
    /// library) is restarted on its new bundle. Unrelated plugins are not touched.
    func rescan() {
        guard !shuttingDown else { return }
        let fresh = PluginCatalog(directories: config.pluginDirectories)
        for problem in fresh.problems { logger.error("\(problem)") }
        catalog = fresh
        let removed = Set(records.keys.filter { fresh.all[$0] == nil })
        var started = 0, changed = 0
        for id in fresh.order {
            guard let manifest = fresh.all[id] else { continue }
            if let existing = records[id] {
                if existing.manifest.fingerprint != manifest.fingerprint || existing.manifest.bundle != manifest.bundle {
                    changed += 1
                    existing.manifest = manifest
                    if let reason = fresh.unstartable[id] {
                        logger.error("\(id) changed on disk and cannot start: \(reason)")
                        stopPlugin(existing) {
                            existing.state = .failed
                            existing.problem = reason
                        }
                        continue
                    }
                    logger.notice("\(id) changed on disk (now \(manifest.version)): restarting it")
                    restartCommand(id) { _ in }
                }
                continue
            }
            let record = PluginRecord(manifest: manifest, state: .waiting)
            if let reason = fresh.unstartable[id] {
                record.state = .failed
                record.problem = reason
            } else {
                started += 1
            }
            records[id] = record
            order.append(id)
        }
        for id in removed {
            let dependents = records.values.filter { !removed.contains($0.identifier) && $0.dependencyIDs.contains(id) }.map(\.identifier)
            if !dependents.isEmpty {
                logger.warning("\(id) was removed; \(dependents.sorted().joined(separator: ", ")) still depend\(dependents.count == 1 ? "s" : "") on it and will get unavailable from it")
            }
        }
        stopRemoved(removed)
        order = fresh.order.filter { records[$0] != nil } + order.filter { fresh.all[$0] == nil && records[$0] != nil }
        logger.notice("rescanned plugin folders: \(started) new, \(changed) changed, \(removed.count) removed")
        startWaitingPlugins()
        flushDirty()
    }

    /// Stops removed plugins in waves, dependents before what they depend on, as shutdown does.
    func stopRemoved(_ removed: Set<String>) {
        let remaining = removed.filter { records[$0] != nil }
        guard !remaining.isEmpty else { return }
        let needed = Set(remaining.compactMap { records[$0] }.flatMap(\.dependencyIDs))
        let wave = remaining.filter { !needed.contains($0) }
        var left = wave.count
        for id in (wave.isEmpty ? remaining : wave) {
            guard let record = records[id] else { continue }
            record.pendingRestart?.cancel()
            stopPlugin(record) { [self] in
                if records[id] === record {
                    records[id] = nil
                    order.removeAll { $0 == id }
                }
                left -= 1
                if left == 0 { stopRemoved(remaining.subtracting(wave)) }
            }
        }
    }
}
