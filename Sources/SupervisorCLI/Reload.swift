import ArgumentParser
import Protocol
import SupervisorClient

struct Reload: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "reload",
        abstract: "Rescan the plugin folders and apply what changed (as SIGHUP does); waits until what it started runs.",
        discussion: "Prints what the rescan found and what runs now, as JSON: new, changed, removed, running, failed. systemd's ExecReload= runs it.")

    @OptionGroup var options: ClientOptions

    func run() throws {
        try options.run(.reload)
    }
}
