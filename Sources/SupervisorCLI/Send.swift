import ArgumentParser
import Protocol
import SupervisorClient

struct Send: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "send", abstract: "Send a lifecycle event (memoryWarning, background, foreground) to every plugin or one.")

    @OptionGroup var options: ClientOptions

    @Argument(help: "memoryWarning, background or foreground.")
    var event: String

    @Option(help: "Only this plugin.")
    var plugin: String?

    func validate() throws {
        if let plugin, !PluginIdentifier.isValid(plugin) {
            throw badUsage("'\(plugin)' is not a plugin identifier ([A-Za-z0-9.-])")
        }
    }

    func run() throws {
        try options.run(.send) { b in
            b.string("name", event)
            if let plugin { b.string("target", plugin) }
        }
    }
}
