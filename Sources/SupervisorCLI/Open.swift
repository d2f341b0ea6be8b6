import ArgumentParser
import Protocol
import SupervisorClient

struct Open: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "open", abstract: "Open a plugin://<identifier>/<path>?<query> URI and print its JSON result.")

    @OptionGroup var options: ClientOptions

    @Argument(help: "The URI.")
    var uri: String

    @OptionGroup var trace: TraceOption

    func validate() throws {
        guard PluginURI(uri) != nil else { throw badUsage("'\(uri)' is not a plugin://<identifier>/<path>?<query> URI") }
    }

    func run() throws {
        try options.run(.open) { b in
            b.string("uri", uri)
            if let traceparent = trace.traceparent { b.string("traceparent", traceparent) }
        }
    }
}
