/// The rule of an update with no call dropped (SPEC §8): when the new version may come up beside
/// the running one (and take over once it answers `startup`). Where an update is, and when a crash
/// rolls it back, is its `UpdateStage`.
package enum UpdateRule {
    /// What comes after the serving worker, as the rule reads it.
    package enum Next: Equatable, Sendable {
        case none
        /// A standby kept beside a running plugin (`standbyWorkers: "always"`): it gives way.
        case keptStandby
        /// Anything else: a new version already coming up, a standby for a restart, a restart's delay.
        case other
    }

    /// Whether an update can start beside the running worker: the supervisor is not shutting down,
    /// the plugin runs with a running worker, nothing else is next (a kept standby gives way), and
    /// the new version's dependencies run. Otherwise it is stopped and started as the new version.
    package static func canStartBeside(shuttingDown: Bool, phase: PluginPhase, workerRunning: Bool, next: Next,
                                       newDependenciesRunning: Bool) -> Bool {
        !shuttingDown && phase == .running && workerRunning && next != .other && newDependenciesRunning
    }
}
