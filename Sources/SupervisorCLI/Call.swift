import ArgumentParser
import Protocol
import SupervisorClient

struct Call: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "call", abstract: "Call a plugin's exported method and print its JSON result.")

    @OptionGroup var options: ClientOptions
    @OptionGroup var plugin: PluginArgument

    @Argument(help: "The method's name.")
    var method: String

    @Argument(help: "Parameters as JSON (default: none).")
    var params: String?

    @Option(help: "Give up after this many milliseconds (default: the plugin's callTimeoutMs).")
    var timeout: UInt64?

    @OptionGroup var trace: TraceOption

    func validate() throws {
        if let params { try JSONArgument.check(params, name: "<json-params>") }
    }

    func run() throws {
        try options.run(.call) { b in
            b.string("target", plugin.identifier)
            b.string("method", method)
            if let params { b.raw("params", Array(params.utf8)) }
            if let timeout { b.uint("timeoutMs", timeout) }
            if let traceparent = trace.traceparent { b.string("traceparent", traceparent) }
        }
    }
}

enum JSONArgument {
    static func check(_ text: String, name: String) throws {
        let bytes = Array(text.utf8)
        do {
            try bytes.withUnsafeBytes { raw in
                var scanner = JSONScanner(raw)
                try scanner.validateValue()
            }
        } catch {
            throw ValidationError("\(name) is not valid JSON: \(error)")
        }
    }
}

/// `--traceparent`: the W3C trace context a request continues (SPEC §3).
struct TraceOption: ParsableArguments {
    @Option(help: "A W3C traceparent (00-<32 hex trace id>-<16 hex span id>-<2 hex flags>) the request continues; without it the supervisor starts a new trace.")
    var traceparent: String?

    func validate() throws {
        if let traceparent, let problem = TraceParentArgument.problem(traceparent) {
            throw ValidationError("--traceparent '\(traceparent)' is not a W3C traceparent: \(problem)")
        }
    }
}
