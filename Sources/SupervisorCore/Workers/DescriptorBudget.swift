/// How many descriptors the supervisor needs for its plugins, and how many plugins fit under an
/// open-files limit (SPEC §16 at scale). Each running worker holds `perWorker` in the supervisor:
/// its protocol socket, descriptor channel and payload channel, its stdout and stderr pipes, its
/// pidfd and its seccomp listener. One more a plugin covers a restart's standby or an update's new
/// version beside the old one; `reserve` covers the supervisor's own (listeners, control clients,
/// the fork server, the log, the home's lock) and the programs' direct links (one each while the
/// link lasts: a duplicate of the worker's end, whose mark is read at the worker's death). A
/// plugin's peer link to a dependency holds one the same way: `peerLinks` counts one for each
/// declared dependency.
package struct DescriptorBudget: Equatable, Sendable {
    package static let perWorker = 7
    package static let perPlugin = perWorker + 1
    package static let reserve = 256
    /// What the supervisor holds of its own before any worker runs (about 30: its event loop, the
    /// listeners, the fork server, the log, the lock): what is left of a limit under the reserve
    /// goes to workers, so a low limit's count of plugins that fit is what does run.
    package static let own = 32

    /// Plugins the supervisor knows (running, or able to run on a call).
    package var plugins: Int
    /// The peer links they may hold at once: their declared dependencies (0 with links off).
    package var peerLinks: Int

    package init(plugins: Int, peerLinks: Int = 0) {
        self.plugins = plugins
        self.peerLinks = peerLinks
    }

    /// The open-files limit these plugins need.
    package var needed: Int { Self.reserve + Self.perPlugin * plugins + peerLinks }

    /// How many plugins can run at once under `limit`: what is left after the supervisor's own,
    /// a worker's descriptors each (the reserve's headroom is what the need asks for, not what a
    /// worker takes).
    package static func plugins(under limit: Int) -> Int {
        max(0, (limit - reserve) / perPlugin, (limit - own) / perWorker)
    }

    /// What to tell the operator when `limit` (the soft limit after raising it as far as the hard
    /// one allows) is too low for these plugins; nil when it is enough.
    package func shortfall(limit: Int, hard: Int) -> String? {
        guard limit < needed else { return nil }
        let fit = Self.plugins(under: limit)
        guard fit < plugins else {
            // Every worker fits, but not the headroom: control clients, direct links, a restart's
            // standby or an update's second worker are what would find no descriptor.
            return "the open-files limit (\(limit), hard limit \(hard)) lets all \(plugins) plugins run, with little room left for "
                + "control clients, direct links, restarts' standbys and updates (each worker holds \(Self.perWorker) descriptors in the supervisor); "
                + "raise it (LimitNOFILE= in the systemd unit, or ulimit -Hn and -n) to at least \(needed)"
        }
        return "the open-files limit (\(limit), hard limit \(hard)) lets about \(fit) of these \(plugins) plugins run at once: "
            + "each running worker holds \(Self.perWorker) descriptors in the supervisor (its sockets, output pipes, pidfd and seccomp listener), "
            + "and \(needed) are needed for all of them; raise it (LimitNOFILE= in the systemd unit, or ulimit -Hn and -n) to at least \(needed). "
            + "A plugin that cannot start for lack of descriptors fails with that reason; the others run"
    }
}
