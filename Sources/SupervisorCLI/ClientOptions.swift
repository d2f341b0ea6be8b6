import ArgumentParser
import Bundles
import LinuxSupport
import PluginProtocol
import Protocol
import SupervisorClient
#if canImport(Glibc)
import Glibc
#endif

/// Options every client command shares: where the running supervisor is.
struct ClientOptions: ParsableArguments {
    @OptionGroup var location: LocationOptions

    @Option(parsing: .unconditional, help: "Wait up to this many seconds for a supervisor that is still starting (`supervisor start &` just before).")
    var wait: Double?

    func validate() throws {
        if let wait, !(wait >= 0 && wait <= 3600) { throw badUsage("--wait must be between 0 and 3600 seconds") }
    }

    var socketPath: String { SupervisorConnection.socketPath(home: location.home, socket: location.socket) }

    /// How long `status` and `metrics` wait for their answer, which the supervisor makes from what
    /// it holds: a supervisor that accepts but does not answer (stopped with SIGSTOP, wedged) does
    /// not hold a health check or `systemctl reload` for good.
    static let quickAnswerMs: UInt64 = 30_000

    /// Runs one request and prints its result; errors go to stderr as `code: message`.
    /// `readLimitMs`: the longest to wait for the supervisor's answer (nil: as long as it takes).
    func run(_ kind: MessageKind, readLimitMs: UInt64? = nil, _ fill: (inout FrameBuilder) -> Void = { _ in },
             print format: (([UInt8]) -> String)? = nil, progress: (ProgressReport) -> Void = { _ in }) throws {
        let result: [UInt8]
        switch request(kind, readLimitMs, fill, progress) {
        case .success(let r): result = r
        case .failure(let failure):
            StandardError.write("\(failure)\n")
            throw ExitCode(failure.isRemote ? 1 : 2)
        }
        let text = format?(result) ?? String(decoding: result, as: UTF8.self)
        if !text.isEmpty { print(text) }
    }

    /// A connection to the supervisor as `--wait` says; `readLimitMs`: the longest to wait for each
    /// answer (nil: as long as it takes).
    func connect(readLimitMs: UInt64? = nil) throws(SupervisorConnection.Failure) -> SupervisorConnection {
        var client = try SupervisorConnection(socketPath: socketPath, startingWait: wait ?? 5, waitForAny: wait != nil)
        if let readLimitMs { client.giveUp(afterMilliseconds: readLimitMs) }
        return client
    }

    private func request(_ kind: MessageKind, _ readLimitMs: UInt64?, _ fill: (inout FrameBuilder) -> Void,
                         _ progress: (ProgressReport) -> Void) -> Result<[UInt8], SupervisorConnection.Failure> {
        do throws(SupervisorConnection.Failure) {
            let client = try connect(readLimitMs: readLimitMs)
            defer { client.close() }
            return .success(try client.request(kind, fill, progress: progress))
        } catch {
            return .failure(error)
        }
    }
}

/// An argument of a client command that cannot be sent, caught before anything is: printed as the
/// supervisor's own errors are (`badRequest: <why>`, SPEC §6), with the exit code of bad usage (64).
func badUsage(_ why: String) -> ExitCode {
    StandardError.write("\(ErrorCode.badRequest.rawValue): \(why)\n")
    return ExitCode(64)
}

/// The plugin a command is about, checked before anything is sent.
struct PluginArgument: ParsableArguments {
    @Argument(help: "The plugin's identifier.")
    var identifier: String

    func validate() throws {
        if let problem = PluginIdentifier.problem(identifier) {
            throw badUsage("'\(identifier.printable)' is not a plugin identifier: \(problem)")
        }
    }
}

/// `--plugin <identifier>`, narrowing a command to one plugin (`send`, `events`), checked before
/// anything is sent.
struct PluginFilter: ParsableArguments {
    @Option(help: "Only this plugin.")
    var plugin: String?

    func validate() throws {
        if let plugin, let problem = PluginIdentifier.problem(plugin) {
            throw badUsage("'\(plugin.printable)' is not a plugin identifier: \(problem)")
        }
    }
}

/// A command that asks the running supervisor to act on one plugin (`restart`, `uninstall`): it
/// sends `request` with the plugin as its `target` and prints the reply, so each such command
/// declares only its name, its request and its arguments.
protocol PluginRequestCommand: ParsableCommand {
    static var request: MessageKind { get }
    var options: ClientOptions { get }
    var plugin: PluginArgument { get }
}

extension PluginRequestCommand {
    func run() throws {
        try options.run(Self.request) { $0.string("target", plugin.identifier) }
    }
}

extension SupervisorConnection.Failure {
    var isRemote: Bool { if case .remote = self { return true } else { return false } }
    var isUnreachable: Bool { if case .unreachable = self { return true } else { return false } }
}

/// Shows install progress: a bar redrawn in place on a terminal, plain lines otherwise. Called from
/// the client's reading thread; the last stage shown is behind a lock.
final class ProgressDisplay: Sendable {
    let terminal = isatty(2) == 1
    private let lastStage = Guarded("")

    func show(_ p: ProgressReport) {
        let label = p.message.map { "\(p.stage) \($0)" } ?? p.stage
        lastStage.withLock { lastStage in
            if terminal {
                var line = label
                if p.total > 0 {
                    let width = 30
                    let filled = Int(Double(width) * Double(p.done) / Double(p.total))
                    line += " [" + String(repeating: "#", count: min(width, filled)) + String(repeating: " ", count: max(0, width - filled)) + "]"
                    line += " \(p.done >> 10)/\(p.total >> 10) KiB"
                } else if p.done > 0 {
                    line += " \(p.done >> 10) KiB"
                }
                StandardError.write("\r\u{1B}[K" + line)
            } else if label != lastStage {
                StandardError.write(label + "\n")
            }
            lastStage = label
        }
    }

    func finish() {
        if terminal && !lastStage.withLock({ $0 }).isEmpty { StandardError.write("\r\u{1B}[K") }
    }
}


@_exported import PluginProtocol
