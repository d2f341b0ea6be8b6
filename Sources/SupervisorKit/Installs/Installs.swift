#if canImport(Glibc)
import Glibc
#endif
import Bundles
import Dispatch
import LinuxSupport
import Logging
import NIOCore
import PluginProtocol
import Protocol
import SupervisorCore

/// Install, update, uninstall, on-demand installs and live resources for a running supervisor
/// (SPEC §9). The slow part (download, checks, unpacking, preflight) runs in `supervisor-installer`,
/// driven from `queue`; the swap, the restart and the rollback run on the event loop.
///
/// Ownership: everything the installer needs is copied into an `InstallRequest` on the loop before
/// the work goes to the queue; the queue has only the `InstallerRunner` (values), and what its
/// result goes back to travels in a `NIOLoopBound` made on the loop (`Engine.handOff`).
final class Installs: SupervisorComponent {
    let shared: Shared
    /// What the install queue may use.
    let runner: InstallerRunner
    let store: BundleStore
    /// Installs and updates between their request and their outcome (an upgrade waits for none).
    var inFlight = 0
    /// Callers waiting for an on-demand install, by plugin.
    var onDemandWaiters: [String: [(ErrorBody?) -> Void]] = [:]
    /// Names the catalog did not list when a call asked for them, and until when that answer
    /// stands (OnDemand.swift): calls to a name nobody offers cost one catalog fetch (an installer
    /// run on the one install queue) per `OnDemand.missRemembered`, not one each.
    var catalogMisses: [String: (until: NIODeadline, answer: ErrorBody)] = [:]
    /// Updates that had not ended when the supervisor last stopped, their previous versions back in
    /// place (`BundleStore.cleanLeftovers`): tried again once every plugin has started.
    var interrupted: [BundleStore.Staged] = []
    /// Install and update requests not answered yet: a stop answers them before the control
    /// socket closes (`answerUnfinished`).
    var unanswered = UnansweredInstalls<ReplyOrigin>()
    /// The stop has answered what waited (`answerUnfinished`): what an install brings back later is dropped.
    var answeredAtStop = false

    init(_ shared: Shared) {
        self.shared = shared
        store = BundleStore(home: shared.config.home)
        runner = InstallerRunner(executable: shared.config.installerExecutable, logger: shared.logger,
                                 preflightPIDs: shared.preflightPIDs, shared: shared.handOff(shared))
    }

    /// Runs `work` on the install queue (installer runs, one at a time, off the event loop).
    func offLoop(_ work: @escaping @Sendable (InstallerRunner) -> Void) {
        let runner = runner
        runner.queue.async { work(runner) }
    }

    var catalogURL: String? { config.updatesEnabled ? config.catalogURL : nil }

    /// A request to `supervisor-installer` with this supervisor's settings. On the loop only: it
    /// reads the plugin table.
    func request(_ operation: InstallRequest.Operation) -> InstallRequest {
        loop.preconditionInEventLoop()
        var request = InstallRequest(operation: operation, home: config.home, lowSpeedSeconds: config.downloadLowSpeedSeconds,
                                     maxBytes: config.downloadMaxBytes)
        request.trustedKeys = config.trustedKeys
        request.keyExpiries = config.keyExpiries
        request.revokedKeys = config.revokedKeys
        request.catalogSignaturesOptional = config.catalogSignaturesOptional
        request.sandbox = config.sandboxEnabled
        request.workerExecutable = config.workerExecutable
        request.runtimePaths = shared.runtimePaths
        var others: [String: String] = [:]
        for record in table.all where !isInstalledHere(record) { others[record.identifier] = record.manifest.bundle }
        request.otherBundles = others
        return request
    }

    /// Whether the plugin's bundle lives in `<home>/plugins` (where installs go).
    func isInstalledHere(_ record: PluginRecord) -> Bool {
        record.manifest.bundle.hasPrefix(pluginsFolder + "/")
    }

    var pluginsFolder: String { FileSystem.realPath(config.home + "/plugins") ?? config.home + "/plugins" }

    /// A catalog request for `url`, made on the loop.
    func catalogRequest(_ url: String) -> InstallRequest {
        var request = request(.catalog)
        request.url = url
        return request
    }

    /// Refreshes the cached catalog in the background (a 304 when unchanged), so on-demand installs
    /// work from the first call.
    func warmCatalog() {
        guard let url = catalogURL else { return }
        let request = catalogRequest(url)
        offLoop { runner in
            do throws(InstallError) { _ = try runner.loadCatalog(request) } catch { runner.logger.warning("catalog not refreshed: \(error)") }
        }
    }

    // MARK: Install

    /// Control request `install` (uri = archive path or URL; params: force, allowUnsigned).
    func installCommand(_ origin: ReplyOrigin, source: String, options: InstallOptions) {
        let ticket = unanswered.add(origin, "the install of \(source)")
        install(source: source, entry: nil, options: options, origin: origin, ticket: ticket) { [self] result in
            guard let origin = unanswered.take(ticket) else { return }
            switch result {
            case .success(let text): outbox.respond(origin) { try ProtocolJSON.encode(["installed": text]) }
            case .failure(let error): outbox.answer(origin, error: error)
            }
        }
    }

    /// Stages with `supervisor-installer` on `queue`, then swaps in and (re)starts on the loop.
    /// `done` runs on the loop. `updating`: an update from the catalog, which installs nothing
    /// new: a plugin uninstalled while its update downloaded stays uninstalled. `ticket`: the
    /// request it answers (`unanswered`); one a stop has answered meanwhile drops what is staged.
    func install(source: String, entry: CatalogEntry?, options: InstallOptions, origin: ReplyOrigin?, updating: Bool = false,
                 ticket: UInt64? = nil, _ done: @escaping (Result<String, ErrorBody>) -> Void) {
        let done = counted(done)
        var staging = request(.stage)
        staging.source = source
        staging.entry = entry
        staging.force = options.force
        staging.allowUnsigned = options.allowUnsigned
        let request = staging
        let back = handOff((self, done, origin))
        offLoop { runner in
            let line: InstallerLine
            do throws(InstallError) {
                line = try runner.runInstaller(request) { p in
                    back.execute { installs, _, origin in
                        guard let origin, ticket.map(installs.unanswered.waits) ?? true else { return }
                        installs.outbox.sendProgress(origin, stage: p.stage, done: p.done, total: p.total)
                    }
                }
            } catch {
                back.execute { _, done, _ in done(.failure(error.body)) }
                return
            }
            guard let staged = line.staged else {
                let error = line.error ?? InstallError(.internalError, "the installer gave no answer").body
                runner.logger.error("install of \(source) failed: \(error.message)")
                back.execute { _, done, _ in done(.failure(error)) }
                return
            }
            back.execute { installs, done, _ in
                if ticket.map({ !installs.unanswered.waits($0) }) ?? installs.answeredAtStop {
                    installs.store.finish(staged)
                    return done(.failure(ErrorBody(.unavailable, "the supervisor stopped before \(staged.identifier) was installed")))
                }
                guard !updating || installs.table[staged.identifier] != nil else {
                    installs.store.finish(staged)
                    return done(.failure(InstallError(.conflict, "\(staged.identifier) was uninstalled while its update downloaded; not installed").body))
                }
                installs.apply(staged, done)
            }
        }
    }

    /// Answers the install and update requests still waiting for their work (a download, a
    /// catalog): the supervisor has stopped every plugin and is about to close its control socket.
    func answerUnfinished() {
        answeredAtStop = true
        for (origin, error) in unanswered.takeAll() { outbox.answer(origin, error: error) }
        // Calls and opens that wait for an install on demand.
        for (target, waiters) in onDemandWaiters.sorted(by: { $0.key < $1.key }) {
            onDemandWaiters[target] = nil
            for waiter in waiters { waiter(ErrorBody(.unavailable, "the supervisor stopped before \(target) was installed on demand")) }
        }
    }

    /// `done` for an install or update that begins now: it counts in `inFlight` until its outcome,
    /// and its outcome in `supervisor_installs_total`.
    func counted(_ done: @escaping (Result<String, ErrorBody>) -> Void) -> (Result<String, ErrorBody>) -> Void {
        inFlight += 1
        return { [self] result in
            inFlight -= 1
            switch result {
            case .success: shared.metrics.installed(outcome: "ok")
            case .failure(let error): shared.metrics.installed(outcome: error.code)
            }
            done(result)
        }
    }

    /// Swaps the staged version in and starts it; on failure swaps the old one back and restarts it.
    func apply(_ staged: BundleStore.Staged, _ done: @escaping (Result<String, ErrorBody>) -> Void) {
        loop.preconditionInEventLoop()
        // One update of a plugin at a time: the files of one still starting must stay as they are.
        if let record = table[staged.identifier], record.update.isStarting || record.installAwaitsVerdict {
            store.finish(staged)
            return done(.failure(InstallError(.conflict, "\(staged.identifier) is being updated already; try again once that is done").body))
        }
        if let conflict = table[staged.identifier]?.removalConflict {
            store.finish(staged)
            return done(.failure(InstallError(.conflict, conflict).body))
        }
        // A previous update still in its grace period is final now: one rollback point at a time.
        if let record = table[staged.identifier] { endGrace(record) }
        do throws(InstallError) {
            // Until it ends, a supervisor that stops finds it at its next start (and tries it again).
            if staged.previous != nil { try store.markUpdate(staged) }
            try store.swapIn(staged)
        } catch {
            store.finish(staged)
            return done(.failure(error.body))
        }
        let id = staged.identifier
        let bundle = FileSystem.realPath(staged.target) ?? staged.target
        let manifest: Manifest
        do { manifest = try Manifest.load(bundle: bundle) } catch {
            try? store.rollBack(staged)
            return done(.failure(InstallError(.invalidManifest, "\(error)").body))
        }
        let what = "\(id) \(staged.version)" + (staged.previous.map { " (was \($0))" } ?? "")
        // Its files' permissions (SPEC §9) are the disk's to tell; the rest is the core's rule.
        let refused = BundlePermissions.refusal(manifest).map { "\(id) \(staged.version) cannot start here: \(manifest.file): refused: \($0); not installed" }
        if let refusal = refused ?? InstallVerdict.judge(manifest, installed: table.all.map(\.manifest)).refusal("\(id) \(staged.version)") {
            try? store.rollBack(staged)
            return done(.failure(InstallError(.conflict, refusal).body))
        }
        guard !isShuttingDown else {
            // An update stays marked: the next start puts the previous version back and applies
            // it then, as any update that had not ended (a new version that never ran proves nothing).
            if staged.previous != nil { return done(.success(what + "; the supervisor is stopping: it is applied when it starts again")) }
            store.finish(staged)
            return done(.success(what + "; it starts with the supervisor"))
        }
        if let record = table[id] {
            replace(record, with: manifest, staged: staged, what: what, done)
        } else {
            let record = PluginRecord(manifest: manifest, phase: .waiting)
            record.installAwaitsVerdict = true
            table.add(record)
            record.startWaiters.append { [self] problem in
                record.installAwaitsVerdict = false
                guard let problem else {
                    store.finish(staged)
                    logger.notice("installed \(what)")
                    events.installed(id, version: "\(staged.version)")
                    done(.success(what))
                    return backToInactive(record, startedFor: true)
                }
                try? store.rollBack(staged)
                // The data and live folders its start made, if nothing was written there: an
                // install that did not happen leaves nothing behind (a folder with content stays).
                for folder in ["/data/", "/live/"] { _ = rmdir(config.home + folder + id) }
                effects.post(.forget(record, because: "\(id) \(staged.version) failed to start: \(problem); not installed"))
                done(.failure(InstallError(.loadFailed, "\(id) \(staged.version) failed to start: \(problem); not installed").body))
            }
            effects.post(.startWaitingPlugins)
        }
    }

    /// An `onCall` plugin installed, or updated (or rolled back) while it was inactive, was started
    /// only to prove that its version loads and starts (the install's verdict): it stops again
    /// until something needs it (SPEC §16), as an idle one does. One that a call waits for or is
    /// inside of stays, as it would for its idle stop.
    func backToInactive(_ record: PluginRecord, startedFor: Bool) {
        record.startedForUpdate = false
        let busy = !(record.instance?.pending.isEmpty ?? false) || !record.waiting.isEmpty
        guard IdleStop.afterItsInstall(startedOnlyToProve: startedFor, onCall: config.activation(of: record.manifest) == .onCall,
                                       phase: record.phase, stopping: record.idleStopping != nil, busy: busy) else { return }
        record.idleStopping = 0
        logger.info("\(record.identifier) \(record.manifest.version) loads and starts; it is onCall, so it stops until it is needed",
                    metadata: ["plugin": "\(record.identifier)"])
        effects.post(.stopIdle(record))
    }

    /// An upgrade of a known plugin. A running one gets its new version started beside the old
    /// worker, which serves until the new one answers `startup` and then drains
    /// (Lifecycle/Successor.swift); if the new one does not get that far, the old files go back and
    /// the old worker never noticed. A plugin that is not running (or whose new version's
    /// dependencies are not) is stopped and started as the new version; if that fails, the old
    /// version goes back and starts again.
    private func replace(_ record: PluginRecord, with manifest: Manifest, staged: BundleStore.Staged, what: String,
                         _ done: @escaping (Result<String, ErrorBody>) -> Void) {
        let files = UpdateFiles(staged: staged, previous: record.manifest, new: manifest, what: what)
        switch record.update.begin(files, shared.canStartBeside(record, manifest) ? .beside : .stopAndStart) {
        case .success(let actions):
            carryOut(actions, record, done)
        case .failure:
            store.finish(staged)
            done(.failure(InstallError(.conflict, "\(record.identifier) is being updated already; try again once that is done").body))
        }
    }
}
