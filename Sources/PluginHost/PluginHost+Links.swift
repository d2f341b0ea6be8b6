#if canImport(Glibc)
import Glibc
#endif
import LinuxSupport
import Logging
import PluginProtocol
import Protocol
import ServiceLifecycle
import SupervisorClient
import SupervisorKit


/// The embedded host's direct links to workers: after a plugin's first call through the loop, its
/// calls go from the calling task straight to the worker (docs/host.md, "The path of a call").
extension PluginHost {
    // MARK: Direct links

    /// The plugins called over a direct link now.
    public var linkedPlugins: [String] {
        links.withLock { s in s.compactMap { if case .ready = $0.value { $0.key } else { nil } }.sorted() }
    }

    func directLink(to target: String) -> DirectLink? {
        links.withLock { s in if case .ready(let link)? = s[target] { link } else { nil } }
    }

    /// After a call went through the supervisor's checks: a link for the next ones, once.
    func askForLink(to target: String) {
        let now = ProcessControl.monotonicNanoseconds()
        let ask = links.withLock { s -> Bool in
            switch s[target] {
            case .asking?, .ready?: return false
            case .refused(let until)? where until > now: return false
            default:
                s[target] = .asking
                return true
            }
        }
        guard ask else { return }
        let supervisor = self.supervisor
        Task { [weak self] in
            let granted = await supervisor.linkForHost(to: target) { [weak self] number, given in
                guard let self else { return given() }
                self.unlink(number, given)
            }
            guard let self else {
                if let granted { close(granted.fd) }
                return
            }
            guard let granted else {
                self.links.withLock { s in
                    if case .asking? = s[target] { s[target] = .refused(until: ProcessControl.monotonicNanoseconds() + 1_000_000_000) }
                }
                return
            }
            // Each call's duration to the program's swift-metrics timer, as the loop's calls do.
            let answered: (@Sendable (CallHop.Outcome, Int64) -> Void)?
            if let timer = supervisor.config.metricsFactory?.makeTimer(label: "plugin_call_duration_seconds", dimensions: [("plugin", target)]) {
                answered = { _, nanoseconds in timer.recordNanoseconds(nanoseconds) }
            } else {
                answered = nil
            }
            let link = DirectLink(number: granted.number, target: target, timeoutMs: granted.timeoutMs, fd: granted.fd,
                                  report: { supervisor.reportLinkCalls($0) },
                                  ended: { [weak self] link in self?.linkEnded(link) },
                                  answered: answered)
            let kept = self.links.withLock { s -> Bool in
                guard case .asking? = s[target] else { return false }
                s[target] = .ready(link)
                return true
            }
            if !kept { link.close() }
        }
    }

    func linkEnded(_ link: DirectLink) {
        links.withLock { s in
            if case .ready(let current)? = s[link.target], current === link { s[link.target] = nil }
        }
    }

    /// The supervisor takes link `number` back (its worker is stopping): calls go through it from
    /// now on, and the link is given back once its calls are settled.
    func unlink(_ number: UInt64, _ given: @escaping @Sendable () -> Void) {
        let link = links.withLock { s -> DirectLink? in
            for (target, slot) in s {
                if case .ready(let l) = slot, l.number == number {
                    s[target] = nil
                    return l
                }
            }
            return nil
        }
        if let link { link.unlink(given) } else { given() }
    }
}
