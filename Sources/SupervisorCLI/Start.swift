import ArgumentParser
import Logging
import Bundles
import LinuxSupport
import Protocol
import SupervisorKit
#if canImport(Glibc)
import Glibc
#endif

struct Start: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "start",
        abstract: "Start the supervisor in the foreground and run every plugin found.",
        discussion: "Prints one line containing `ready` on stdout once every startable plugin has started; logs go to stderr. SIGTERM or `supervisor stop` shuts down cleanly.")

    @Option(name: .customLong("plugins"), help: "A folder of plugin bundles; repeat for more. <home>/plugins, where installs go, is always scanned too.")
    var pluginDirectories: [String] = []

    @OptionGroup var location: LocationOptions

    @Option(help: "A JSON config file (docs/operations.md).")
    var config: String?

    @Flag(help: "Run workers without the sandbox (benchmarks and diagnosis only; status shows it).")
    var noSandbox = false

    @Option(help: "How workers start: fork-server (forked by a process that has the worker's code loaded) or exec (default: the config's workerStart, else fork-server).")
    var workerStart: String?

    @Option(help: "Log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel: String = "info"

    @Option(help: "Log format on stderr: text, or json (one JSON object a line, for a log collector).")
    var logFormat: String = "text"

    @Option(help: "Run this plugin for a debugger: no watchdog, no call or startup timeout, a worker its user can attach to (docs/debugging.md). Repeat for more.")
    var debug: [String] = []

    func validate() throws {
        guard Logger.Level(rawValue: logLevel) != nil else {
            throw ValidationError("--log-level must be one of trace, debug, info, notice, warning, error, critical")
        }
        guard ["text", "json"].contains(logFormat) else {
            throw ValidationError("--log-format must be text or json, not '\(logFormat)'")
        }
        if let workerStart, SupervisorConfig.WorkerStart(rawValue: workerStart) == nil {
            throw ValidationError("--worker-start must be fork-server or exec, not '\(workerStart)'")
        }
        if pluginDirectories.contains("") { throw ValidationError("--plugins is empty; give a folder of plugin bundles") }
        for id in debug {
            if let problem = PluginIdentifier.problem(id) { throw ValidationError("--debug '\(id.printable)' is not a plugin identifier: \(problem)") }
        }
    }

    func run() throws {
        // A standard descriptor started closed (`2>&-`) is /dev/null: otherwise the first
        // descriptor the supervisor opens takes its number, and the log is written into it.
        for fd in Int32(0)...2 where fcntl(fd, F_GETFD) == -1 {
            let null = open("/dev/null", O_RDWR)
            if null >= 0, null != fd { _ = dup2(null, fd); close(null) }
        }
        // Before any thread is made: one it could not make would end it without a word, or hold
        // it for good at its exit (a thread pool's queue sleeps and retries where it cannot).
        if UpgradeHandover.descriptorsFromEnvironment() == nil, let why = Self.addressSpaceTooSmall() {
            StandardError.write("supervisor: \(why)\n")
            throw ExitCode(1)
        }
        // Asked by a running supervisor before it execs this binary with these arguments
        // (`UpgradeHandover.startProbeVariable`): they were taken, and that is all it asks.
        if ProcessEnvironment[UpgradeHandover.startProbeVariable] == "1" {
            // The config file it would read must be usable too: one broken on disk refuses the
            // upgrade here, rather than end this binary (and every plugin) after the exec.
            if let config {
                var settings = commandLineSettings
                do { try settings.apply(configFile: config) } catch {
                    StandardError.write("supervisor: \(error)\n")
                    throw ExitCode(2)
                }
            }
            print(UpgradeHandover.probeAnswer)
            return
        }
        // A crash or a watchdog's SIGABRT ends the supervisor at once (and its workers with it).
        InPlaceExec.fatalSignalsEndTheProcess()
        // Exec'd by an upgrade in place: until this binary has taken over, a crash or a stall
        // brings the previous one back with the same handover (docs/operations.md).
        if let fds = UpgradeHandover.descriptorsFromEnvironment(), !UpgradeHandover.isRescue {
            try? InPlaceExec.armRescue(previous: fds.previousBinary, seconds: 5)
            if ProcessEnvironment["SP_TEST_CRASH_ON_TAKEOVER"] == ProductVersion.current {
                // Tests of the rescue only: this build crashes where a faulty one would.
                fatalError("SP_TEST_CRASH_ON_TAKEOVER")
            }
        }
        let level = Logger.Level(rawValue: logLevel)!
        let json = logFormat == "json"
        LoggingSystem.bootstrap { label in
            if json {
                var handler = JSONLogHandler(label: label)
                handler.logLevel = level
                return handler
            }
            var handler = TextLogHandler(label: label)
            handler.logLevel = level
            return handler
        }
        let handover: UpgradeHandover?
        do { handover = try UpgradeHandover.fromEnvironment() } catch {
            LogWriter.flushAll(milliseconds: 500)
            InPlaceExec.fireRescue("the new binary refused the snapshot: \(error)")
            fatal(error)
            throw ExitCode(1)
        }
        var settings = commandLineSettings
        var unusedConfig: SupervisorError?
        if let config {
            do { try settings.apply(configFile: config) } catch {
                if handover?.failure != nil, let text = handover?.configText {
                    // The previous binary, brought back by a rescue: it carries on with the settings
                    // it had, whatever became of the file meanwhile (said once the log is up).
                    settings = commandLineSettings
                    try? settings.apply(configText: Array(text.utf8), file: config)
                    unusedConfig = error
                } else {
                    // After an upgrade's exec: the previous binary comes back (and says why) rather
                    // than every plugin going with this process. Nothing happens otherwise.
                    LogWriter.flushAll(milliseconds: 500)
                    InPlaceExec.fireRescue("the new binary cannot read the config file: \(error)")
                    fatal(error)
                    throw ExitCode(2)
                }
            }
            if !pluginDirectories.isEmpty { settings.pluginDirectories = pluginDirectories.map(FileSystem.absolute) }
            if let socket = location.socket { settings.socketPath = socket }
        }
        if noSandbox { settings.sandboxEnabled = false }
        if let mode = workerStart.flatMap(SupervisorConfig.WorkerStart.init(rawValue:)) { settings.workerStart = mode }
        settings.debugPlugins = Set(debug)
        let logger = Logger(label: "supervisor")
        if let unusedConfig {
            logger.warning("upgrade: \(unusedConfig); this binary carries on with the settings it ran with before the upgrade")
        }
        let companions = handover?.fillMissingExecutables(&settings) ?? []
        for taken in companions {
            // Through the log, in its format: a JSON log is one object a line.
            logger.warning("upgrade: this binary has no \(taken); the previous binary's is used")
        }
        let supervisor = Supervisor(config: settings, logger: logger, handover: handover)
        // The log is written by a thread of its own (LogWriter), which exit ends: its last lines first.
        defer { LogWriter.flushAll() }
        do {
            try supervisor.run { line in
                print(line)
                fflush(nil)
            }
        } catch {
            LogWriter.flushAll(milliseconds: 500)
            InPlaceExec.fireRescue("the new binary could not take over: \(error)")
            fatal(error)
            throw ExitCode(1)
        }
    }

    /// The least address space (RLIMIT_AS) the supervisor starts with: each of its threads
    /// reserves a stack and a malloc arena (64 MiB of address space, not of memory).
    static let addressSpaceFloor = 1 << 30

    /// Why the address-space limit (`ulimit -v`, systemd `LimitAS=`) is too small, once its soft
    /// value has been raised as far as the hard one allows; nil when it is enough or unlimited.
    static func addressSpaceTooSmall() -> String? {
        var limit = rlimit()
        let resource = __rlimit_resource_t(RLIMIT_AS.rawValue)
        guard getrlimit(resource, &limit) == 0, limit.rlim_cur != rlim_t.max, limit.rlim_cur < rlim_t(addressSpaceFloor) else { return nil }
        if limit.rlim_max > limit.rlim_cur {
            limit.rlim_cur = limit.rlim_max
            _ = setrlimit(resource, &limit)
            if limit.rlim_cur == rlim_t.max || limit.rlim_cur >= rlim_t(addressSpaceFloor) { return nil }
        }
        return "the address-space limit (RLIMIT_AS: ulimit -v, or LimitAS= in a systemd unit) is \(limit.rlim_cur >> 20) MiB; "
            + "the supervisor needs \(addressSpaceFloor >> 20) MiB at least, as each of its threads reserves a stack and a malloc arena "
            + "(address space, not memory). Raise or remove it; limit memory with a cgroup instead (MemoryMax= in the unit)"
    }

    /// The settings the command line gives before any config file is applied.
    private var commandLineSettings: SupervisorConfig {
        SupervisorConfig(home: location.home, pluginDirectories: pluginDirectories, socketPath: location.socket)
    }

    /// Why the supervisor cannot start (or go on), last: a line of the log in its format (one JSON
    /// object with `--log-format json`), as a person reads it otherwise.
    private func fatal(_ error: any Error) {
        // Its line last, after what the log's thread has not written yet.
        LogWriter.flushAll()
        if logFormat == "json" {
            Logger(label: "supervisor").critical("\(error)")
            LogWriter.flushAll()
        } else {
            StandardError.write("supervisor: \(error)\n")
        }
    }
}
