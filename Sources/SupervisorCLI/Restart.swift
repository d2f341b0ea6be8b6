import ArgumentParser
import Protocol
import SupervisorClient

struct Restart: PluginRequestCommand {
    static let configuration = CommandConfiguration(commandName: "restart", abstract: "Restart one plugin (also one that has failed), and wait until it runs.")
    static let request = MessageKind.restart

    @OptionGroup var options: ClientOptions
    @OptionGroup var plugin: PluginArgument
}
