import ArgumentParser
#if canImport(Glibc)
import Glibc
#endif
import LinuxSupport
import Protocol
import SupervisorClient

struct Call: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "call", abstract: "Call a plugin's exported method and print its JSON result.")

    @OptionGroup var options: ClientOptions
    @OptionGroup var plugin: PluginArgument

    @Argument(help: "The method's name.")
    var method: String

    @Argument(help: ArgumentHelp("Parameters as JSON (default: none).", valueName: "json-params"))
    var params: String?

    // `.unconditional`: `--timeout -1` is read as the value it is (and refused as one), not as an
    // option named `-1` that leaves `--timeout` without a value.
    @Option(parsing: .unconditional, help: "Give up after this many milliseconds (default: the plugin's callTimeoutMs).")
    var timeout: UInt64?

    @OptionGroup var trace: TraceOption

    @Flag(help: "Call a method that answers with a stream: print each element as one JSON line as it arrives (then the final result, unless it is null); an element of raw bytes prints {\"bytes\": N} and goes to --output FILE, if given.")
    var stream = false

    @Option(help: "Write the bytes the answer carries (a method that answers with raw bytes) to this file instead of printing them; prints {\"bytes\": N, \"output\": FILE}.")
    var output: String?

    @Option(help: "Send this file's bytes with the call, without base64 (a sealed memfd above 64 KiB): the params name them {\"$bytes\": 0}; without params they are {\"data\": {\"$bytes\": 0}}.")
    var input: String?

    func validate() throws {
        if let params { try JSONArgument.check(params, name: "<json-params>") }
        if stream, input != nil { throw badUsage("--stream does not take --input") }
        if timeout == 0 { throw badUsage("--timeout is 0; give at least 1 millisecond (or leave it out for the plugin's callTimeoutMs)") }
        if let input, let problem = Self.unreadable(input) { throw badUsage("--input \(input.printable): \(problem)") }
        // Checked before the call runs: its answer must have somewhere to go.
        if let output, let problem = Self.unwritable(output) { throw badUsage("--output \(output.printable): \(problem)") }
    }

    /// Why `path` cannot be sent as a call's bytes, if it cannot.
    static func unreadable(_ path: String) -> String? {
        guard !path.isEmpty else { return "is empty; give a file's path" }
        var st = stat()
        guard stat(path, &st) == 0 else { return String(cString: strerror(errno)) }
        guard (st.st_mode & S_IFMT) == S_IFREG else { return "is not a regular file" }
        return access(path, R_OK) == 0 ? nil : String(cString: strerror(errno))
    }

    /// Why the answer's bytes could not be written to `path`, if they could not.
    static func unwritable(_ path: String) -> String? {
        guard !path.isEmpty else { return "is empty; give a file's path" }
        var st = stat()
        if stat(path, &st) == 0 {
            if (st.st_mode & S_IFMT) == S_IFDIR { return "is a folder" }
            return access(path, W_OK) == 0 ? nil : String(cString: strerror(errno))
        }
        let folder = path.contains("/") ? String(path[..<path.lastIndex(of: "/")!]) : "."
        guard access(folder.isEmpty ? "/" : folder, W_OK) == 0 else { return "cannot be made in \(folder.isEmpty ? "/" : folder): \(String(cString: strerror(errno)))" }
        return nil
    }

    /// The supervisor answers `timeout` (or ends a stream) at the call's own timeout; one that does
    /// not answer at all (stopped, wedged) is given up on 5 s after it, whatever the call's form.
    var readLimitMs: UInt64? { timeout.map { $0 + 5_000 } }

    func run() throws {
        if stream { return try runStream() }
        if input != nil || output != nil { return try runWithBytes() }
        try options.run(.call, readLimitMs: readLimitMs, { b in
            b.string("target", plugin.identifier)
            b.string("method", method)
            if let params { b.raw("params", Array(params.utf8)) }
            if let timeout { b.uint("timeoutMs", timeout) }
            if let traceparent = trace.traceparent { b.string("traceparent", traceparent) }
        }, print: { result in
            // The answer's raw bytes do not print: say where they can go.
            if Self.bytesIndex(result) != nil {
                StandardError.write("the answer is raw bytes; give --output FILE to write them\n")
            }
            return String(decoding: result, as: UTF8.self)
        })
    }
}

extension Call {
    /// `--input FILE`: the file's bytes go with the call (inline up to 64 KiB, else a sealed memfd
    /// the kernel fills from the file, handed in at the supervisor's handoff socket). `--output
    /// FILE`: the answer's bytes (`{"$bytes": i}`, else its first attachment) go to the file, the
    /// kernel copying a memfd's pages (`sendfile`); without `--output` the result is printed.
    private func runWithBytes() throws {
        var sending: [AttachedBytes] = []
        if let input {
            // What `validate` could not see coming (the file changed since): said once, as bad usage.
            do { sending = [try AttachedBytes.file(input)] } catch let error as ErrorBody {
                throw badUsage("--input: \(error.message)")
            }
        }
        defer { for b in sending { b.close() } }
        let answer: (result: [UInt8], bytes: [AttachedBytes])
        do throws(SupervisorConnection.Failure) {
            let client = try options.connect(readLimitMs: readLimitMs)
            defer { client.close() }
            let params = params ?? (input != nil ? #"{"data":{"$bytes":0}}"# : nil)
            answer = try client.requestWithBytes(.call, sending: sending) { b in
                b.string("target", plugin.identifier)
                b.string("method", method)
                if let params { b.raw("params", Array(params.utf8)) }
                if let timeout { b.uint("timeoutMs", timeout) }
                if let traceparent = trace.traceparent { b.string("traceparent", traceparent) }
            }
        } catch {
            StandardError.write("\(error)\n")
            throw ExitCode(error.isRemote ? 1 : 2)
        }
        defer { for b in answer.bytes { b.close() } }
        guard let path = output else {
            var line = answer.result
            line.append(0x0A)
            line.withUnsafeBytes { StandardOutput.write($0) }
            return
        }
        let index = Self.bytesIndex(answer.result) ?? 0
        guard index < answer.bytes.count else {
            StandardError.write("the answer carries no bytes (its result: \(String(decoding: answer.result.prefix(200), as: UTF8.self)))\n")
            throw ExitCode(1)
        }
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else {
            StandardError.write("cannot write \(path): \(String(cString: strerror(errno)))\n")
            throw ExitCode(2)
        }
        defer { close(fd) }
        do { try answer.bytes[index].write(to: fd) } catch {
            StandardError.write("cannot write \(path): \(error)\n")
            throw ExitCode(2)
        }
        print(#"{"bytes":\#(answer.bytes[index].count),"output":"\#(path)"}"#)
    }

    /// `i` of a result that is exactly `{"$bytes": i}`.
    static func bytesIndex(_ result: [UInt8]) -> Int? {
        struct Placeholder: Decodable { var index: Int; enum CodingKeys: String, CodingKey { case index = "$bytes" } }
        return (try? ProtocolJSON.decode(Placeholder.self, from: result))?.index
    }

    /// `--stream`: one line per element, written as it arrives; the process's stdout is a pipe
    /// more often than not, so each line is flushed (a reader sees it at once). Elements of raw
    /// bytes are appended to `--output FILE`, if given.
    private func runStream() throws {
        let result: [UInt8]
        var file: Int32 = -1
        if let output {
            file = open(output, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
            guard file >= 0 else {
                StandardError.write("cannot write \(output): \(String(cString: strerror(errno)))\n")
                throw ExitCode(2)
            }
        }
        defer { if file >= 0 { close(file) } }
        var failedWrite: String?
        do throws(SupervisorConnection.Failure) {
            let client = try options.connect(readLimitMs: readLimitMs)
            defer { client.close() }
            result = try client.stream({ b in
                b.string("target", plugin.identifier)
                b.string("method", method)
                if let params { b.raw("params", Array(params.utf8)) }
                if let timeout { b.uint("timeoutMs", timeout) }
                if let traceparent = trace.traceparent { b.string("traceparent", traceparent) }
            }, { data, isBytes in
                var line = isBytes ? Array(#"{"bytes":\#(data.count)}"#.utf8) : Array(data)
                line.append(0x0A)
                line.withUnsafeBytes { StandardOutput.write($0) }
                if isBytes, file >= 0, failedWrite == nil {
                    var done = 0
                    while done < data.count {
                        let n = write(file, data.baseAddress! + done, data.count - done)
                        if n < 0 { if errno == EINTR { continue }; failedWrite = String(cString: strerror(errno)); break }
                        done += n
                    }
                }
            })
        } catch {
            StandardError.write("\(error)\n")
            throw ExitCode(error.isRemote ? 1 : 2)
        }
        if let failedWrite, let output {
            StandardError.write("cannot write \(output): \(failedWrite)\n")
            throw ExitCode(2)
        }
        if result != Array("null".utf8) {
            var line = result
            line.append(0x0A)
            line.withUnsafeBytes { StandardOutput.write($0) }
        }
    }
}

enum JSONArgument {
    /// A value that goes inside the request's own object: one level less than a frame may hold.
    static func check(_ text: String, name: String) throws {
        let bytes = Array(text.utf8)
        let limit = Frame.defaultMaxDepth - 1
        do {
            try bytes.withUnsafeBytes { raw in
                var scanner = JSONScanner(raw, maxDepth: limit)
                try scanner.validateValue()
            }
        } catch {
            if case JSONScanner.Failure.tooDeep? = error as? JSONScanner.Failure {
                throw badUsage("\(name) is nested deeper than \(limit) levels: inside the request around it, that is over the protocol's \(Frame.defaultMaxDepth)")
            }
            throw badUsage("\(name) is not valid JSON: \(error)")
        }
    }
}

/// `--traceparent`: the W3C trace context a request continues (SPEC §3).
struct TraceOption: ParsableArguments {
    @Option(help: "A W3C traceparent (00-<32 hex trace id>-<16 hex span id>-<2 hex flags>) the request continues; without it the supervisor starts a new trace.")
    var traceparent: String?

    func validate() throws {
        if let traceparent, let problem = TraceParentArgument.problem(traceparent) {
            throw badUsage("--traceparent '\(traceparent)' is not a W3C traceparent: \(problem)")
        }
    }
}
