import Bundles
import Logging
import NIOCore
import PluginProtocol
import Protocol
import SupervisorCore

extension Installs {
    /// A CLI's call or open for a plugin that is not installed: if the catalog offers it `onDemand`,
    /// install it and then forward the request, unless the request's own timeout ends first.
    /// Returns false when no catalog is configured (the caller answers notFound at once).
    func forwardOnDemand(_ kind: MessageKind, to target: String, request bytes: UnsafeRawBufferPointer, timeoutMs requested: UInt64?,
                         origin: ReplyOrigin) -> Bool {
        let copy = Array(bytes)
        // Settled exactly once: by the install's outcome or by the timeout, whichever comes first.
        final class Once { var settled = false }
        let once = Once()
        let waitMs = CallHop.timeoutMs(requested: requested, otherwise: config.callTimeoutMs)
        let started = onDemand(target) { [self] failure in
            guard !once.settled else { return }
            once.settled = true
            if let failure { return outbox.answer(origin, error: failure) }
            effects.post(.replay(kind, target: target, frame: copy, origin: origin))
        }
        guard started else { return false }
        loop.assumeIsolated().scheduleTask(in: .milliseconds(Int64(waitMs))) { [self] in
            guard !once.settled else { return }
            once.settled = true
            outbox.answer(origin, error: ErrorBody(.timeout, "\(target) was still being installed on demand after \(waitMs) ms"))
        }
        return true
    }

    /// Installs `target` if the catalog offers it on demand; concurrent first calls share one
    /// install. The catalog is fetched when its cached copy does not list the plugin. `replay` gets
    /// nil once installed, or the error to answer. False when no catalog is configured.
    private func onDemand(_ target: String, replay: @escaping (ErrorBody?) -> Void) -> Bool {
        guard let url = catalogURL else { return false }
        if let miss = catalogMisses[target], miss.until > .now() {
            replay(miss.answer)
            return true
        }
        if onDemandWaiters[target] != nil {
            onDemandWaiters[target]!.append(replay)
            return true
        }
        onDemandWaiters[target] = [replay]
        let settle: (ErrorBody?) -> Void = { [self] error in
            let waiters = onDemandWaiters.removeValue(forKey: target) ?? []
            for w in waiters { w(error) }
        }
        let request = catalogRequest(url)
        let home = config.home
        let back = handOff((self, settle))
        offLoop { runner in
            let cached = CatalogCache.newest(CatalogCache.entries(home: home, url: url)).first { $0.identifier == target }
            let entry = cached ?? (try? runner.loadCatalog(request)).flatMap { CatalogCache.newest($0.entries).first { $0.identifier == target } }
            back.execute { installs, settle in
                installs.installOnDemand(target, entry: entry, settle)
            }
        }
        return true
    }

    /// The catalog's answer for an on-demand install, back on the loop.
    private func installOnDemand(_ target: String, entry: CatalogEntry?, _ settle: @escaping (ErrorBody?) -> Void) {
        guard let entry, entry.onDemand == true else {
            let answer = Self.notOffered(target, entry: entry)
            remember(target, answer)
            return settle(answer)
        }
        logger.notice("installing \(target) \(entry.version) on demand")
        install(source: entry.url, entry: entry, options: InstallOptions(), origin: nil) { result in
            switch result {
            case .success: settle(nil)
            case .failure(let e): settle(ErrorBody(.unavailable, "on-demand install of \(target) failed: \(e.message)"))
            }
        }
    }

    /// How long a name the catalog does not offer on demand is answered `notFound` without looking
    /// at the catalog again.
    static let missRemembered = TimeAmount.seconds(10)

    /// The answer for a name the catalog does not offer on demand.
    static func notOffered(_ target: String, entry: CatalogEntry?) -> ErrorBody {
        ErrorBody(.notFound, "no plugin \(target) is installed" + (entry == nil ? "" : "; the catalog has it, but not on demand: `supervisor install` it"))
    }

    /// Notes that the catalog does not offer `target` on demand (`answer`), for `missRemembered`. At most
    /// 4,096 names are kept: past them the expired go, then all (a flood of made-up names).
    private func remember(_ target: String, _ answer: ErrorBody) {
        let now = NIODeadline.now()
        if catalogMisses.count >= 4_096 {
            catalogMisses = catalogMisses.filter { $0.value.until > now }
            if catalogMisses.count >= 4_096 { catalogMisses = [:] }
        }
        catalogMisses[target] = (now + Self.missRemembered, answer)
    }
}
