import ArgumentParser
import Protocol
import SupervisorClient

struct Send: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "send", abstract: "Send a lifecycle event (memoryWarning, background, foreground) to every plugin or one.")

    @OptionGroup var options: ClientOptions

    @Argument(help: "memoryWarning, background or foreground.")
    var event: String

    @OptionGroup var filter: PluginFilter

    func run() throws {
        try options.run(.send) { b in
            b.string("name", event)
            if let plugin = filter.plugin { b.string("target", plugin) }
        }
    }
}
