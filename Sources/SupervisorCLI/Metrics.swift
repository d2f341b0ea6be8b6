import ArgumentParser
import Protocol
import SupervisorClient

struct Metrics: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "metrics",
        abstract: "Print the supervisor's metrics in the Prometheus text format.",
        discussion: "The same text `GET /metrics` serves when the config sets metrics.listen (docs/operations.md#metrics).")

    @OptionGroup var options: ClientOptions

    func run() throws {
        try options.run(.metrics, readLimitMs: ClientOptions.quickAnswerMs, print: { result in
            // The result is the exposition as one JSON string.
            (try? ProtocolJSON.decode(String.self, from: result))?.trimmingSuffixNewlines ?? String(decoding: result, as: UTF8.self)
        })
    }
}

private extension String {
    /// `print` adds the last newline back.
    var trimmingSuffixNewlines: String {
        var s = Substring(self)
        while s.hasSuffix("\n") { s = s.dropLast() }
        return String(s)
    }
}
