import ArgumentParser
import SupervisorKit

struct Open: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Open a plugin://<identifier>/<path>?<query> URI and print its JSON result.")

    @OptionGroup var options: ClientOptions

    @Argument(help: "The URI.")
    var uri: String

    func validate() throws {
        guard PluginURI(uri) != nil else { throw ValidationError("'\(uri)' is not a plugin://<identifier>/<path>?<query> URI") }
    }

    func run() throws {
        try options.run(.open) { $0.string("uri", uri) }
    }
}
