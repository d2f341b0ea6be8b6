import ArgumentParser
import Protocol
import SupervisorClient

struct Restart: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "restart", abstract: "Restart one plugin (also one that has failed), and wait until it runs.")

    @OptionGroup var options: ClientOptions
    @OptionGroup var plugin: PluginArgument

    func run() throws {
        try options.run(.restart) { $0.string("target", plugin.identifier) }
    }
}
