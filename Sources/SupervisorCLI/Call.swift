import ArgumentParser
import LinuxSupport
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

    @Flag(help: "Call a method that answers with a stream: print each element as one JSON line as it arrives (then the final result, unless it is null).")
    var stream = false

    func validate() throws {
        if let params { try JSONArgument.check(params, name: "<json-params>") }
    }

    func run() throws {
        if stream { return try runStream() }
        try options.run(.call) { b in
            b.string("target", plugin.identifier)
            b.string("method", method)
            if let params { b.raw("params", Array(params.utf8)) }
            if let timeout { b.uint("timeoutMs", timeout) }
            if let traceparent = trace.traceparent { b.string("traceparent", traceparent) }
        }
    }
}

extension Call {
    /// `--stream`: one line per element, written as it arrives; the process's stdout is a pipe
    /// more often than not, so each line is flushed (a reader sees it at once).
    private func runStream() throws {
        let result: [UInt8]
        do throws(SupervisorConnection.Failure) {
            let client = try SupervisorConnection(socketPath: options.socketPath, startingWait: options.wait ?? 5, waitForAny: options.wait != nil)
            defer { client.close() }
            result = try client.stream({ b in
                b.string("target", plugin.identifier)
                b.string("method", method)
                if let params { b.raw("params", Array(params.utf8)) }
                if let timeout { b.uint("timeoutMs", timeout) }
                if let traceparent = trace.traceparent { b.string("traceparent", traceparent) }
            }, { data in
                var line = Array(data)
                line.append(0x0A)
                line.withUnsafeBytes { StandardOutput.write($0) }
            })
        } catch {
            StandardError.write("\(error)\n")
            throw ExitCode(error.isRemote ? 1 : 2)
        }
        if result != Array("null".utf8) {
            var line = result
            line.append(0x0A)
            line.withUnsafeBytes { StandardOutput.write($0) }
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
