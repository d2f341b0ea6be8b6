import ArgumentParser
import Protocol
import SupervisorClient

struct Stop: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "stop", abstract: "Shut the supervisor down cleanly (as SIGTERM does).")

    @OptionGroup var options: ClientOptions

    func run() throws {
        try options.run(.stop)
    }
}
