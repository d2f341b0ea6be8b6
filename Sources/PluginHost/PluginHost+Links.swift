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
    public var linkedPlugins: [String] { links.plugins }

    /// After a call went through the supervisor's checks: a link for the next ones, once.
    func askForLink(to target: String) {
        guard links.shouldAsk(for: target) else { return }
        let supervisor = self.supervisor
        let links = self.links
        let pollMicroseconds = configuration.linkPollMicroseconds
        Task {
            let granted = await supervisor.linkForHost(to: target) { number, given in links.unlink(number, answer: given) }
            guard let granted else { return links.refused(target) }
            // Each call's duration to the program's swift-metrics timer, as the loop's calls do.
            let answered: (@Sendable (CallHop.Outcome, Int64) -> Void)?
            if let timer = supervisor.config.metricsFactory?.makeTimer(label: "plugin_call_duration_seconds", dimensions: [("plugin", target)]) {
                answered = { _, nanoseconds in timer.recordNanoseconds(nanoseconds) }
            } else {
                answered = nil
            }
            links.granted(DirectLink(number: granted.number, target: target, timeoutMs: granted.timeoutMs, fd: granted.fd,
                                     report: { supervisor.reportLinkCalls($0) },
                                     ended: { links.ended($0) }, answered: answered, pollMicroseconds: pollMicroseconds))
        }
    }
}
