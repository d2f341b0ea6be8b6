import ArgumentParser
import LinuxSupport
import Protocol
import SupervisorClient
import SupervisorKit

struct Upgrade: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "upgrade",
        abstract: "Replace the running supervisor with a new binary in place, without stopping a plugin (as SIGUSR2 does).",
        discussion: """
            The supervisor checks the binary (an executable of this architecture that reads its state), waits until no call \
            passes through it, and execs it with the same pid: workers keep their pids, state and restart counts, calls over \
            direct links go on, and control clients keep their connections. A binary that crashes, refuses the state or does \
            not take over within 5 s leaves the old one serving, unchanged. Prints {"upgraded": {"from", "to", "pid", \
            "workers", "pauseMs"}}; refused: the reason on stderr, exit 1.
            """)

    @Option(help: "The new binary (default: the path the running supervisor was started from, e.g. after a package upgrade replaced it).")
    var binary: String?

    @OptionGroup var options: ClientOptions

    func validate() throws {
        if binary == "" { throw badUsage("--binary is empty; give the new binary's path (or leave it out for the one the supervisor was started from)") }
    }

    func run() throws {
        let path = binary.map(FileSystem.absolute)
        try options.run(.upgrade) { b in
            if let path { b.object("params", ["binary": .string(path)]) }
        }
    }
}

/// Asked by a running supervisor before it execs this binary in place of itself: which version
/// this is and which snapshot formats it reads (one JSON line). Not for people.
/// With the running supervisor's arguments after it, it also checks that this binary takes them
/// (an option it no longer knows would end it before it could take over).
struct UpgradeProbeCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "upgrade-probe", shouldDisplay: false)

    @Argument(parsing: .captureForPassthrough)
    var arguments: [String] = []

    func run() throws {
        if !arguments.isEmpty {
            do { _ = try SupervisorCommand.parseAsRoot(arguments) } catch {
                StandardError.write("it does not take the running supervisor's arguments (\(arguments.joined(separator: " "))): \(SupervisorCommand.message(for: error))\n")
                throw ExitCode(3)
            }
        }
        print(UpgradeHandover.probeAnswer)
    }
}
