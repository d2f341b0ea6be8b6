#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Bundles
import Dispatch
import LinuxSupport
import Logging
import NIOCore
import PluginProtocol
#if canImport(Glibc)
import Glibc
#endif

/// Install, update, uninstall and on-demand installs for a running supervisor (SPEC §9). The slow
/// part (download, checks, unpacking, preflight) runs on `installQueue`; the swap, the restart and
/// the rollback run on the event loop.
extension Supervisor {
    struct InstallParams: Decodable {
        var force: Bool?
        var allowUnsigned: Bool?
        var check: Bool?
    }

    var store: BundleStore { BundleStore(home: config.home) }

    /// A request to `supervisor-installer` with this supervisor's settings.
    func installRequest(_ operation: InstallRequest.Operation) -> InstallRequest {
        var request = InstallRequest(operation: operation, home: config.home, lowSpeedSeconds: config.downloadLowSpeedSeconds,
                                     maxBytes: config.downloadMaxBytes)
        request.trustedKeys = config.trustedKeys
        request.sandbox = config.sandboxEnabled
        request.workerExecutable = config.workerExecutable
        request.runtimePaths = runtimePaths
        let home = FileSystem.realPath(config.home + "/plugins") ?? config.home + "/plugins"
        var others: [String: String] = [:]
        for record in records.values where !record.manifest.bundle.hasPrefix(home + "/") { others[record.identifier] = record.manifest.bundle }
        request.otherBundles = others
        return request
    }

    /// Runs the installer (on the install queue): its child is reaped by the reaper, its preflight
    /// workers are refused on the control socket while they live.
    func runInstaller(_ request: InstallRequest, progress: @escaping @Sendable (InstallerLine.Progress) -> Void = { _ in }) throws(InstallError) -> InstallerLine {
        var preflights: [pid_t] = []
        // The installer reaps its preflight workers: forget them when it is done (a pid is reused).
        defer { preflightPIDs.withLock { set in for pid in preflights { set.remove(pid) } } }
        return try InstallerProcess(executable: config.installerExecutable).run(
            request, progress: progress,
            preflight: { [self] pid in
                preflights.append(pid)
                preflightPIDs.withLock { _ = $0.insert(pid) }
            })
    }

    var catalogURL: String? { config.updatesEnabled ? config.catalogURL : nil }

    /// Fetches the catalog through the installer (conditional GET, cached copy when the server fails).
    func loadCatalog(_ url: String) throws(InstallError) -> CatalogLoaded {
        var request = installRequest(.catalog)
        request.url = url
        let line = try runInstaller(request)
        if let e = line.error { throw InstallError(body: e) }
        guard let catalog = line.catalog else { throw InstallError(.internalError, "the installer gave no catalog") }
        return catalog
    }

    /// Tells a waiting CLI how far a long request got.
    func sendProgress(_ origin: ReplyOrigin, stage: String, done: Int64, total: Int64, message: String? = nil) {
        guard case .client(let connection, let id) = origin, !connection.closed else { return }
        var b = FrameBuilder(kind: .progress)
        b.uint("id", id)
        b.string("stage", stage)
        b.uint("done", UInt64(max(0, done)))
        b.uint("total", UInt64(max(0, total)))
        if let message { b.string("message", message) }
        write(b.finish(), to: connection.channel)
        flushDirty()
    }

    /// Control request `install` (uri = archive path or URL; params: force, allowUnsigned).
    func installRequest(_ origin: ReplyOrigin, source: String, params: InstallParams) {
        let options = InstallOptions(force: params.force ?? false, allowUnsigned: params.allowUnsigned ?? false)
        install(source: source, entry: nil, options: options, origin: origin) { [self] result in
            switch result {
            case .success(let text): respond(origin) { try ProtocolJSON.encode(["installed": text]) }
            case .failure(let error): answer(origin, error: error)
            }
            flushDirty()
        }
    }

    struct InstallOptions: Sendable {
        var force = false
        var allowUnsigned = false
    }

    /// Stages with `supervisor-installer` on the install queue, then swaps in and (re)starts on the
    /// loop. `done` runs on the loop.
    func install(source: String, entry: CatalogEntry?, options: InstallOptions, origin: ReplyOrigin?,
                 _ done: @escaping @Sendable (Result<String, ErrorBody>) -> Void) {
        var request = installRequest(.stage)
        request.source = source
        request.entry = entry
        request.force = options.force
        request.allowUnsigned = options.allowUnsigned
        let store = self.store
        let staging = request
        installQueue.async { [self] in
            let line: InstallerLine
            do throws(InstallError) {
                line = try runInstaller(staging) { [self] p in
                    if let origin { loop.execute { self.sendProgress(origin, stage: p.stage, done: p.done, total: p.total) } }
                }
            } catch {
                loop.execute { done(.failure(error.body)) }
                return
            }
            guard let staged = line.staged else {
                let error = line.error ?? ErrorBody(.badRequest, "the installer gave no answer")
                logger.error("install of \(source) failed: \(error.message)")
                loop.execute { done(.failure(error)) }
                return
            }
            loop.execute { self.apply(staged, store: store, done) }
        }
    }

    /// Swaps the staged version in and starts it; on failure swaps the old one back and restarts it.
    func apply(_ staged: BundleStore.Staged, store installer: BundleStore, _ done: @escaping @Sendable (Result<String, ErrorBody>) -> Void) {
        do { try installer.swapIn(staged) } catch {
            installer.finish(staged)
            return done(.failure(error.body))
        }
        let id = staged.identifier
        let bundle = FileSystem.realPath(staged.target) ?? staged.target
        let manifest: Manifest
        do { manifest = try Manifest.load(bundle: bundle) } catch {
            try? installer.rollBack(staged)
            return done(.failure(InstallError(.invalidManifest, "\(error)").body))
        }
        let what = "\(id) \(staged.version)" + (staged.previous.map { " (was \($0))" } ?? "")
        // Its dependencies must be installed, in range, and not make a cycle.
        var others = records.values.filter { $0.identifier != id }.map(\.manifest)
        others.append(manifest)
        if let problem = PluginCatalog(manifests: others).unstartable[id] {
            try? installer.rollBack(staged)
            return done(.failure(InstallError(.conflict, "\(id) \(staged.version) cannot start here: \(problem); not installed").body))
        }
        guard !shuttingDown else {
            installer.finish(staged)
            return done(.success(what + "; it starts with the supervisor"))
        }
        if let record = records[id] {
            let old = record.manifest
            let begin: () -> Void = { [self] in
                record.manifest = manifest
                record.rollbackOnFailure = true
                startAgain(record) { [self] problem in
                    record.rollbackOnFailure = false
                    guard let problem else {
                        installer.finish(staged)
                        logger.notice("installed \(what); the previous version is deleted")
                        return done(.success(what))
                    }
                    // The new version did not start: the old one goes back and runs again.
                    do { try installer.rollBack(staged) } catch {
                        return done(.failure(InstallError(.fileSystem, "the new version failed (\(problem)) and rolling back failed: \(error)").body))
                    }
                    record.manifest = old
                    logger.error("\(id) \(staged.version) failed to start (\(problem)); rolled back to \(old.version)")
                    restartCommand(id) { _ in }
                    done(.failure(InstallError(.loadFailed, "\(id) \(staged.version) failed to start: \(problem); rolled back to \(old.version)").body))
                }
            }
            if record.instance != nil { stopPlugin(record) { begin() } } else { begin() }
        } else {
            let record = PluginRecord(manifest: manifest, state: .waiting)
            record.rollbackOnFailure = true
            records[id] = record
            order.append(id)
            record.startWaiters.append { [self] problem in
                record.rollbackOnFailure = false
                guard let problem else {
                    installer.finish(staged)
                    logger.notice("installed \(what)")
                    return done(.success(what))
                }
                try? installer.rollBack(staged)
                records[id] = nil
                order.removeAll { $0 == id }
                done(.failure(InstallError(.loadFailed, "\(id) \(staged.version) failed to start: \(problem); not installed").body))
            }
            startWaitingPlugins()
        }
        flushDirty()
    }

    /// Control request `update` (params.check: only list what is newer).
    func updateRequest(_ origin: ReplyOrigin, params: InstallParams) {
        guard config.updatesEnabled else { return answer(origin, error: ErrorBody(.denied, "updates are switched off in the config (updates: false)")) }
        guard let url = catalogURL else {
            return answer(origin, error: ErrorBody(.badRequest, "no catalog is configured (config key catalog)"))
        }
        installQueue.async { [self] in
            let loaded: CatalogLoaded
            do throws(InstallError) { loaded = try loadCatalog(url) } catch {
                loop.execute { self.answer(origin, error: error.body); self.flushDirty() }
                return
            }
            loop.execute { [self] in
                struct Available: Encodable { var identifier: String; var installed: String; var available: String }
                var updates: [(CatalogEntry, Available)] = []
                for entry in loaded.entries {
                    guard let record = records[entry.identifier], let v = SemanticVersion(entry.version), v > record.manifest.version,
                      record.manifest.bundle.hasPrefix((FileSystem.realPath(config.home + "/plugins") ?? config.home + "/plugins") + "/") else { continue }
                    updates.append((entry, Available(identifier: entry.identifier, installed: record.manifest.version.description, available: entry.version)))
                }
                if params.check == true {
                    struct Check: Encodable { var catalog: String; var updates: [Available] }
                    return respond(origin) { try ProtocolJSON.encode(Check(catalog: loaded.source, updates: updates.map(\.1))) }
                }
                applyUpdates(updates.map(\.0), origin: origin, done: [], failed: [:])
            }
        }
    }

    /// Installs catalog entries one after the other, then answers.
    func applyUpdates(_ remaining: [CatalogEntry], origin: ReplyOrigin, done: [String], failed: [String: String]) {
        guard let entry = remaining.first else {
            struct Outcome: Encodable { var updated: [String]; var failed: [String: String] }
            respond(origin) { try ProtocolJSON.encode(Outcome(updated: done, failed: failed)) }
            return flushDirty()
        }
        sendProgress(origin, stage: "update", done: Int64(done.count + failed.count), total: Int64(done.count + failed.count + remaining.count),
                     message: "\(entry.identifier) \(entry.version)")
        install(source: entry.url, entry: entry, options: InstallOptions(), origin: origin) { [self] result in
            var done = done, failed = failed
            switch result {
            case .success(let text): done.append(text)
            case .failure(let error): failed[entry.identifier] = error.message
            }
            applyUpdates(Array(remaining.dropFirst()), origin: origin, done: done, failed: failed)
        }
    }

    /// Control request `uninstall`.
    func uninstallRequest(_ origin: ReplyOrigin, identifier: String) {
        guard let record = records[identifier] else { return answer(origin, error: ErrorBody(.notFound, "no plugin \(identifier) is installed")) }
        let home = FileSystem.realPath(config.home + "/plugins") ?? config.home + "/plugins"
        guard record.manifest.bundle.hasPrefix(home + "/") else {
            return answer(origin, error: ErrorBody(.denied, "\(identifier) is not installed in \(home) (it comes from \(record.manifest.bundle)); remove its bundle there"))
        }
        let needed = records.values.filter { $0.dependencyIDs.contains(identifier) && $0.identifier != identifier }.map(\.identifier).sorted()
        guard needed.isEmpty else {
            return answer(origin, error: ErrorBody(.denied, "\(identifier) is needed by \(needed.joined(separator: ", ")); uninstall those first"))
        }
        let installer = store
        record.pendingRestart?.cancel()
        record.pendingRestart = nil
        record.state = .stopped
        stopPlugin(record) { [self] in
            do throws(InstallError) {
                try installer.remove(URL(fileURLWithPath: record.manifest.bundle).lastPathComponent)
            } catch {
                return answer(origin, error: error.body)
            }
            if records[identifier] === record {
                records[identifier] = nil
                order.removeAll { $0 == identifier }
            }
            logger.notice("uninstalled \(identifier) \(record.manifest.version)")
            respond(origin) { try ProtocolJSON.encode(["uninstalled": "\(identifier) \(record.manifest.version)"]) }
            flushDirty()
        }
    }

    /// Refreshes the cached catalog in the background (a 304 when unchanged), so on-demand installs
    /// work from the first call.
    func warmCatalog() {
        guard let url = catalogURL else { return }
        installQueue.async { [self] in
            do { _ = try loadCatalog(url) } catch { logger.warning("catalog not refreshed: \(error)") }
        }
    }

    // MARK: On demand

    /// A call or open for a plugin that is not installed: if the catalog offers it `onDemand`, install
    /// it and then forward; concurrent first calls share one install. The catalog is fetched when its
    /// cached copy does not list the plugin. Returns false when no catalog is configured (the caller
    /// answers notFound at once); otherwise `replay` gets nil once installed, or the error to answer.
    func onDemand(_ target: String, replay: @escaping (ErrorBody?) -> Void) -> Bool {
        guard let url = catalogURL else { return false }
        if onDemandWaiters[target] != nil {
            onDemandWaiters[target]!.append(replay)
            return true
        }
        onDemandWaiters[target] = [replay]
        let settle: @Sendable (ErrorBody?) -> Void = { [self] error in
            let waiters = onDemandWaiters.removeValue(forKey: target) ?? []
            for w in waiters { w(error) }
            flushDirty()
        }
        installQueue.async { [self] in
            let cached = CatalogCache.entries(home: config.home, url: url).first { $0.identifier == target }
            let entry = cached ?? (try? loadCatalog(url))?.entries.first { $0.identifier == target }
            loop.execute { [self] in
                guard let entry, entry.onDemand == true else {
                    return settle(ErrorBody(.notFound, "no plugin \(target) is installed" + (entry == nil ? "" : "; the catalog has it, but not on demand: `supervisor install` it")))
                }
                logger.notice("installing \(target) \(entry.version) on demand")
                install(source: entry.url, entry: entry, options: InstallOptions(), origin: nil) { result in
                    switch result {
                    case .success: settle(nil)
                    case .failure(let e): settle(ErrorBody(.unavailable, "on-demand install of \(target) failed: \(e.message)"))
                    }
                }
            }
        }
        return true
    }

    // MARK: Live resources

    /// Refreshes a plugin's live resources (conditional GET), never replacing a good file with a
    /// failed or partial download; each 200 is announced with `resourceUpdated`.
    func refreshResources(_ record: PluginRecord, force: Bool = false) {
        guard config.updatesEnabled, let resources = record.manifest.resources else { return }
        let id = record.identifier
        let live = config.home + "/live/" + id
        let base = installRequest(.fetch)
        let daily = resources.daily
        installQueue.async { [self] in
            let meta = live + "/.meta"
            try? FileSystem.makeDirectories(meta)
            for name in resources.files {
                struct Validators: Codable { var etag: String?; var lastModified: String?; var checked: Double }
                let metaFile = meta + "/" + name.replacing("%", with: "%25").replacing("/", with: "%2F") + ".json"
                let previous = (try? FileSystem.readFile(metaFile, limit: 1 << 16)).flatMap { try? JSONDecoder().decode(Validators.self, from: Data($0)) }
                let destination = live + "/" + name
                let now = Date().timeIntervalSince1970
                if daily, !force, let previous, now - previous.checked < 86_400, FileSystem.exists(destination) { continue }
                if let slash = destination.lastIndex(of: "/") { try? FileSystem.makeDirectories(String(destination[..<slash])) }
                let temp = destination + ".download"
                let known = FileSystem.exists(destination) ? previous : nil
                do {
                    var request = base
                    request.url = resources.baseURL + "/" + name
                    request.destination = temp
                    request.etag = known?.etag
                    request.lastModified = known?.lastModified
                    let line = try runInstaller(request)
                    if let e = line.error { throw InstallError(body: e) }
                    guard let outcome = line.fetched else { throw InstallError(.internalError, "the installer gave no answer") }
                    switch outcome.notModified ? nil : outcome {
                    case nil:
                        let v = Validators(etag: known?.etag, lastModified: known?.lastModified, checked: now)
                        try? Data(try JSONEncoder().encode(v)).write(to: URL(fileURLWithPath: metaFile))
                    case .some(let fetched):
                        let etag = fetched.etag, lastModified = fetched.lastModified
                        do { try FileSystem.rename(temp, to: destination) } catch { throw InstallError(.fileSystem, "cannot replace \(destination): \(error)") }
                        let v = Validators(etag: etag, lastModified: lastModified, checked: now)
                        try? Data(try JSONEncoder().encode(v)).write(to: URL(fileURLWithPath: metaFile))
                        loop.execute { [self] in
                            guard let record = records[id], record.state == .running else { return }
                            logger.info("resource \(name) refreshed", metadata: ["plugin": "\(id)"])
                            let payload = Array(#"{"name":"#.utf8) + JSONEscaping.quoted(name) + Array(#","path":"#.utf8) + JSONEscaping.quoted(destination) + [UInt8(ascii: "}")]
                            sendEvent(record, .resourceUpdated, payload: payload) { _ in }
                            flushDirty()
                        }
                    }
                } catch {
                    unlink(temp)
                    logger.warning("resource \(name) not refreshed: \(error); the plugin keeps its current copy", metadata: ["plugin": "\(id)"])
                }
            }
        }
    }
}
