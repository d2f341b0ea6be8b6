import ArgumentParser
import SupervisorKit

struct Restart: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Restart one plugin (also one that has failed), and wait until it runs.")

    @OptionGroup var options: ClientOptions

    @Argument(help: "The plugin's identifier.")
    var identifier: String

    func run() throws {
        try options.run(.restart) { $0.string("target", identifier) }
    }
}
