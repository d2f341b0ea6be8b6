import ArgumentParser
import LinuxSupport
import Protocol
import SupervisorClient

struct Send: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "send", abstract: "Send a lifecycle event (memoryWarning, background, foreground) to every plugin or one.")

    @OptionGroup var options: ClientOptions

    @Argument(help: "memoryWarning, background or foreground.")
    var event: String

    @OptionGroup var filter: PluginFilter

    func run() throws {
        var failures = FailedEntries()
        try options.run(.send, { b in
            b.string("name", event)
            if let plugin = filter.plugin { b.string("target", plugin) }
        }, print: { failures.read($0) })
        try failures.exitIfAny()
    }
}

/// The `failed` entries of an answer that has them (`send`, `update`): printed on stderr, one a
/// line, and exit code 1 once the answer itself is printed.
struct FailedEntries {
    private var failed: [String: String] = [:]

    /// Keeps the answer's `failed` entries and gives the answer's text to print.
    mutating func read(_ raw: [UInt8]) -> String {
        struct Outcome: Decodable { var failed: [String: String]? }
        failed = (try? ProtocolJSON.decode(Outcome.self, from: raw))?.failed ?? [:]
        return String(decoding: raw, as: UTF8.self)
    }

    func exitIfAny() throws {
        guard !failed.isEmpty else { return }
        for (id, why) in failed.sorted(by: { $0.key < $1.key }) { StandardError.write("\(id.printable): \(why.printable)\n") }
        throw ExitCode(1)
    }
}
