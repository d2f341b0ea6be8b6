import ArgumentParser

@main
struct SupervisorCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "supervisor",
        abstract: "Run native plugins, each in its own sandboxed worker process.",
        subcommands: [Start.self, Status.self, Call.self, Open.self, Send.self, Restart.self, Reload.self, Metrics.self, Stop.self,
                      Install.self, Update.self, Uninstall.self, New.self])
}
