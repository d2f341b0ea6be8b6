import CProcessRoles
import CoreMetrics
import LinuxSupport
import SupervisorClient
import SupervisorKit

extension PluginHost {
    /// What an embedded supervisor runs: `pluginFolders` and `home` as `supervisor start --plugins
    /// … --home …`, and every other setting as `supervisor start` has it by default, each one a
    /// property (`configuration.callTimeoutMs = 2_000`, `configuration.sandboxEnabled = false`: the
    /// keys of the config file, docs/operations.md), or read from a config file (`apply(configFile:)`).
    ///
    /// Unlike `supervisor start`, an embedded host takes no signal (`handlesSignals`, off) and looks
    /// for the worker's binaries beside the program, else in `$SUPERVISOR_BINARIES`, else beside the
    /// `supervisor` found on `$PATH` (`binaries` names the folder); where none has them, the
    /// program's own executable serves as its workers' and fork server's binary (docs/host.md,
    /// "Binaries").
    @dynamicMemberLookup
    public struct Configuration: Sendable {
        /// Every setting of the supervisor.
        public var settings: SupervisorConfig

        /// `supervisor start --plugins … --home …` as a host program's: no signal handling,
        /// metrics to the program's swift-metrics backend, the workers' binaries found as the
        /// overview says (beside the program, else the program's own executable).
        public init(pluginFolders: [String], home: String) {
            settings = SupervisorConfig(home: home, pluginDirectories: pluginFolders)
            settings.handlesSignals = false
            settings.ownsProcess = false
            settings.metricsFactory = MetricsSystem.factory
            if let folder = Self.binariesFolder() {
                settings.useBinaries(in: folder)
            } else if sp_program_serves_workers() != 0 {
                settings.useProgramAsWorkerBinary()
            }
        }

        /// The folders scanned for plugin bundles (`<home>/plugins`, where installs go, is always scanned too).
        public var pluginFolders: [String] {
            get { settings.pluginDirectories }
            set { settings.pluginDirectories = newValue.map(FileSystem.absolute) }
        }

        /// The host's home: its data folders, installed plugins and control socket
        /// (`<home>/supervisor.sock`).
        public var home: String { settings.home }

        /// Workers sandboxed (the default) or not (`--no-sandbox`).
        public var sandbox: Bool {
            get { settings.sandboxEnabled }
            set { settings.sandboxEnabled = newValue }
        }

        /// SIGTERM/SIGINT stop the host's plugins, SIGHUP rescans, … (SPEC §7) — only when asked: the
        /// signals belong to the program. In a `ServiceGroup`, the group's own signal handling stops it.
        public var handlesSignals: Bool {
            get { settings.handlesSignals }
            set { settings.handlesSignals = newValue }
        }

        /// Whether `<home>/supervisor.sock` is served, so `supervisor status --home <home>` and the
        /// other client commands reach the embedded host (on by default).
        public var controlSocket: Bool {
            get { settings.servesControlSocket }
            set { settings.servesControlSocket = newValue }
        }

        /// Where the metrics go besides the host's own registry (`metrics()`): the program's
        /// swift-metrics backend (`MetricsSystem.factory`, as bootstrapped when the host was made)
        /// unless set otherwise; nil keeps them in the host's registry alone.
        public var metricsFactory: (any MetricsFactory)? {
            get { settings.metricsFactory }
            set { settings.metricsFactory = newValue }
        }

        /// How long the thread of a direct link to a worker polls for the next reply before it
        /// sleeps, at most: adapted to how close together replies come (0 while they are far apart),
        /// and one link's thread of the program at a time. It saves a lone call the wake-up of a
        /// sleeping thread (docs/host.md, "The path of a call"), for up to this much of one CPU
        /// after each reply while calls follow each other closely; 0: never poll (at most
        /// `SupervisorClient.maxLinkPollMicroseconds`, 10 ms).
        public var linkPollMicroseconds = SupervisorClient.defaultLinkPollMicroseconds

        /// The folder of `plugin-worker`, `plugin-forkserver`, `libPluginWorkerCore.so` and
        /// `supervisor-installer` (`swift build` of this project puts them in its `.build/debug`);
        /// empty while the program's own executable serves as the workers' binary (`workersRunProgram`).
        public var binaries: String {
            get { settings.workersRunProgram ? "" : String(settings.workerExecutable.dropLast("/plugin-worker".count)) }
            set { settings.useBinaries(in: FileSystem.absolute(newValue)) }
        }

        /// Whether the program's own executable is its workers' and fork server's binary: no
        /// `plugin-worker` was found beside it, in `$SUPERVISOR_BINARIES` or on `$PATH`, and it has
        /// the worker's code linked in (every program with PluginHost has). Setting `binaries` ends it.
        public var workersRunProgram: Bool { settings.workersRunProgram }

        /// Any other setting, by its name in `SupervisorConfig` (`callTimeoutMs`, `restartLimit`, …).
        public subscript<Value>(dynamicMember keyPath: WritableKeyPath<SupervisorConfig, Value>) -> Value {
            get { settings[keyPath: keyPath] }
            set { settings[keyPath: keyPath] = newValue }
        }

        /// Applies a config file (the format of `supervisor start --config`); settings made after it win.
        public mutating func apply(configFile path: String) throws(SupervisorError) {
            try settings.apply(configFile: path)
        }

        /// Where the worker's binaries are: beside this program, else `$SUPERVISOR_BINARIES`, else
        /// beside a `supervisor` on `$PATH`; nil when none has them (the program's own executable
        /// serves then).
        static func binariesFolder() -> String? {
            let env = ProcessEnvironment.all
            var candidates = [FileSystem.executableDirectory()]
            if let given = env["SUPERVISOR_BINARIES"], !given.isEmpty { candidates.append(given) }
            for folder in (env["PATH"] ?? "").split(separator: ":") where FileSystem.exists("\(folder)/supervisor") {
                candidates.append(String(folder))
            }
            return candidates.first { FileSystem.exists($0 + "/plugin-worker") }.map(FileSystem.absolute)
        }
    }
}
