import ArgumentParser
#if canImport(Glibc)
import Glibc
#endif
import LinuxSupport
import Protocol

/// Every command names itself (`commandName`): without a name ArgumentParser derives one from the
/// type with `String(describing:)`, whose first use for each type scans every protocol conformance
/// record of the process, about 3 ms of each `supervisor` run (`supervisor start` included) for
/// the fourteen of them (docs/benchmarks.md, "The supervisor's own start").
@main
struct SupervisorCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "supervisor",
        abstract: "Run native plugins, each in its own sandboxed worker process.",
        version: ProductVersion.current,
        subcommands: [Start.self, Status.self, Call.self, Open.self, Send.self, Restart.self, Reload.self, Metrics.self, Events.self, Stop.self,
                      Install.self, Update.self, Uninstall.self, New.self, Upgrade.self, UpgradeProbeCommand.self])

    /// ArgumentParser's own, but for one rule of SPEC §6: `call` and `open` print every error as
    /// `code: message`, also a value ArgumentParser refuses (`--timeout -1`), as `badRequest`
    /// (exit 64), the code of the checks their `validate` makes.
    static func main() {
        // Paths and values are taken as UTF-8: an argument that is not (a 0xFF byte) would reach the
        // commands with U+FFFD in its place, naming another folder than the one given.
        for i in 1..<Int(CommandLine.argc) {
            guard let raw = CommandLine.unsafeArgv[i], String(validatingCString: raw) == nil else { continue }
            let shown = String(decoding: UnsafeBufferPointer(start: UnsafeRawPointer(raw).assumingMemoryBound(to: UInt8.self), count: strlen(raw)), as: UTF8.self)
            StandardError.write("\(ErrorCode.badRequest.rawValue): argument \(i) ('\(shown.printable)') is not UTF-8; paths and values must be\n")
            Glibc.exit(ExitCode.validationFailure.rawValue)
        }
        let arguments = Array(CommandLine.arguments.dropFirst())
        do {
            var command = try parseAsRoot(arguments)
            try command.run()
        } catch {
            // An empty message: a check of ours that wrote its own line (`badUsage`).
            let text = message(for: error)
            if !text.isEmpty, let name = arguments.first, name == Call.configuration.commandName || name == Open.configuration.commandName,
               exitCode(for: error) == .validationFailure {
                StandardError.write("\(ErrorCode.badRequest.rawValue): \(text)\n")
                Glibc.exit(ExitCode.validationFailure.rawValue)
            }
            exit(withError: error)
        }
    }
}
