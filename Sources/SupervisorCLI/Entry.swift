import ArgumentParser
import Protocol

/// Every command names itself (`commandName`): without a name ArgumentParser derives one from the
/// type with `String(describing:)`, whose first use for each type scans every protocol conformance
/// record of the process, about 3 ms of each `supervisor` run (`supervisor start` included) for
/// the fourteen of them (docs/benchmarks.md, "The supervisor's own start").
@main
struct SupervisorCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "supervisor",
        abstract: "Run native plugins, each in its own sandboxed worker process.",
        version: ProductVersion.current,
        subcommands: [Start.self, Status.self, Call.self, Open.self, Send.self, Restart.self, Reload.self, Metrics.self, Events.self, Stop.self,
                      Install.self, Update.self, Uninstall.self, New.self, Upgrade.self, UpgradeProbeCommand.self])
}
