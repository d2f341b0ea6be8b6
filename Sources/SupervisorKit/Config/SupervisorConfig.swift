#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
#if canImport(Glibc)
import Glibc
#endif
import CoreMetrics
import LinuxSupport
import PluginProtocol
import Protocol
import SupervisorCore

/// Everything `supervisor start` can be told, with defaults that need no config file.
public struct SupervisorConfig: Sendable {
    /// The home folder: plugins, data, live resources, the control socket and the lock.
    public var home: String
    /// Folders scanned for plugin bundles: those given, and always `<home>/plugins`, where installs go.
    public var pluginDirectories: [String] {
        get { extraPluginDirectories + (extraPluginDirectories.contains(home + "/plugins") ? [] : [home + "/plugins"]) }
        set { extraPluginDirectories = newValue }
    }
    private var extraPluginDirectories: [String]
    public var socketPath: String
    /// The config file's text as it was applied (nil: none): an upgrade's snapshot carries it, for
    /// the previous binary brought back by a rescue when the file cannot be used any more.
    public var configFileText: String?
    /// The `plugin-worker` executable (default: beside the running supervisor).
    public var workerExecutable: String
    /// How workers are started (docs/sandbox.md, "The fork server").
    public enum WorkerStart: String, Sendable, CaseIterable {
        /// Each worker is a new process image: `plugin-worker` by posix_spawn (or clone into its
        /// namespaces) and exec.
        case exec
        /// The fork server, which has the worker's code loaded, forks each worker; where it cannot
        /// start or fails, workers are exec'd and `status` says why.
        case forkServer = "fork-server"
    }
    /// `workerStart` in the config: the fork server unless told otherwise (it starts a worker in
    /// about a tenth of the time; docs/benchmarks.md).
    public var workerStart = WorkerStart.forkServer
    /// `peerLinks` in the config: calls from a plugin to a dependency go over a direct link
    /// between their workers once the first one has gone through the supervisor (docs/protocol.md
    /// "Peer links"). Off, every call passes through the supervisor (and is logged at debug level).
    public var peerLinks = true
    /// When a plugin's next worker is made ahead of need (docs/architecture.md, "Restarts: the
    /// standby worker"): a worker sandboxed and waiting before the plugin's library loads, taken
    /// by an immediate restart after a crash.
    public enum StandbyWorkers: String, Sendable, CaseIterable {
        /// None: a restart spawns its worker after the crashed one is reaped.
        case never
        /// On a crash's notice, while the crashed worker is still ending (the default).
        case onCrash = "on-crash"
        /// One kept beside every running plugin from the moment the supervisor is ready, so that a
        /// restart waits for no spawn and no sandbox: twice the sandboxed processes.
        case always
    }
    /// `standbyWorkers` in the config.
    public var standbyWorkers = StandbyWorkers.onCrash
    /// `workerSpinMicroseconds` in the config: how long a worker's I/O thread polls its socket
    /// before it sleeps, at most (adapted to how far apart its messages come: IPC/SpinWindow.swift);
    /// 0: never.
    public var workerSpinMicroseconds = 0
    /// The fork server and the worker's code it loads (default: beside the running supervisor).
    public var forkServerExecutable: String
    public var workerLibrary: String
    /// The `supervisor-installer` executable (default: beside the running supervisor).
    public var installerExecutable: String
    public var maxFrameBytes = Frame.defaultMaxBody
    /// What the supervisor holds at most for one worker (its requests in flight, its readers' held
    /// input) or one control client (its unread answers, its waiting calls' input): `HeldBytes`.
    var heldBytesLimit: Int { HeldBytes.limit(maxFrameBytes: maxFrameBytes) }
    /// The least `maxFrameBytes` may be (the config file refuses less).
    public static let smallestFrameLimit = 1 << 20
    /// The largest bytes one attachment may carry (SPEC §13), in MiB; larger ones are refused with
    /// `badRequest` before anything maps them.
    public var maxPayloadMB = Attachments.defaultMaxPayloadMB
    public var maxJSONDepth = Frame.defaultMaxDepth
    /// A worker must say hello and answer `startup` within this.
    public var startupTimeoutMs = 10_000
    /// Default per-call timeout; a manifest's `limits.callTimeoutMs` and a call's `timeoutMs` override it.
    public var callTimeoutMs = CallTimeouts.defaultMs
    /// Default longest gap between two chunks of a stream (SPEC §13); a manifest's
    /// `limits.streamIdleTimeoutMs` overrides it. The whole stream is a call: its timeout holds too.
    public var streamIdleTimeoutMs = CallTimeouts.defaultMs
    /// How long `willTerminate` may take before the worker is killed.
    public var shutdownGraceMs = 5_000
    /// At most this many restarts in `restartWindowSeconds`, then `failed`.
    public var restartLimit = 5
    public var restartWindowSeconds = 60
    /// Delay before the second restart in a row; doubles each time up to `restartBackoffMaxMs`.
    public var restartBackoffBaseMs = 100
    public var restartBackoffMaxMs = 10_000
    /// Also restart dependents when a plugin restarts (OTP's rest_for_one).
    public var restartDependents = false
    /// Watchdog: ping every worker with something inside this often; one that does not answer within
    /// `pingTimeoutMs` is killed.
    public var pingIntervalMs = 1_000
    public var pingTimeoutMs = 3_000
    /// A worker that sends more `log` messages than this in one second is flooding: it is killed
    /// (`protocolViolation`). Below it, past 200 a second, its messages are dropped and counted.
    public var floodLogsPerSecond = SupervisorConfig.defaultFloodLogsPerSecond
    /// When the workers of plugins whose manifest does not say start (SPEC §16): `.eager`, with the
    /// supervisor, or `.onCall`, when something needs them.
    public var activation: Manifest.Activation = .eager
    /// Plugins whose manifest does not say are stopped after this long without call, stream or link
    /// traffic, and are `inactive` until needed (SPEC §16); nil: never.
    public var idleStopMs: Int? = nil
    public static let defaultFloodLogsPerSecond = 20_000
    /// A worker with nothing inside (no request in flight, no caller's link) is pinged and has its
    /// memory sampled only this often, all such workers in one tick: idle plugins cost the
    /// supervisor about nothing between these checks. A call sent to it is watched from the next
    /// tick on.
    public var idleCheckIntervalMs = 30_000
    /// Sandbox on (default) or off (benchmarks, diagnosis).
    public var sandboxEnabled = true
    /// A control group per worker where the host allows (docs/sandbox.md, "cgroups"); false leaves
    /// workers in the supervisor's group (moving each costs the kernel a grace period at start).
    public var workerCgroups = true
    /// The plugin catalog's URL (http, https or file), for `update` and on-demand installs.
    public var catalogURL: String?
    /// Trusted publisher keys: base64 raw Ed25519 public keys.
    public var trustedKeys: [String] = []
    /// Trusted keys with an end: key → RFC 3339 time (`{"key": ..., "expires": ...}` in `trustedKeys`).
    public var keyExpiries: [String: String] = [:]
    /// Keys whose signatures are never accepted (`revokedKeys`).
    public var revokedKeys: [String] = []
    /// `catalogSignatures: "optional"`: a catalog without `.sig` is accepted, with a warning (migration).
    public var catalogSignaturesOptional = false
    /// `false` switches updates off: no catalog fetches, no on-demand installs, no resource refresh.
    public var updatesEnabled = true
    /// Downloads slower than 1 KiB/s for this long are aborted; at most this many bytes.
    public var downloadLowSpeedSeconds = 15
    public var downloadMaxBytes = 256 << 20
    /// Sandbox layers the operator demands; a plugin is not started where one is missing.
    public var requiredSandboxLayers: [SandboxLayer] = []
    /// Requests that may wait for one plugin while it starts, restarts or drains (SPEC §8).
    public var callQueueLimit = 1_024
    /// How long a planned stop waits for the calls inside a worker to be answered before
    /// `willTerminate` (restart, reload, update, shutdown).
    public var drainTimeoutMs = 5_000
    /// How long an updated plugin's previous version is kept to roll back to if the new one crashes.
    public var updateGraceSeconds = 30
    /// Where `GET /metrics` is served (`host:port`), if anywhere: the config's `metrics.listen`.
    public var metricsListen: String?
    /// `start --debug <identifier>`: plugins run for a debugger (docs/debugging.md): no watchdog, no
    /// call or startup timeout, a dumpable worker. Only these; every other plugin as usual.
    public var debugPlugins: Set<String> = []
    /// Whether the supervisor takes the process's lifecycle signals (SPEC §7: blocks them in every
    /// thread and waits for them on a thread of its own). `supervisor start` does; an embedded
    /// `PluginHost` does not unless asked, since the signals belong to the program it runs in.
    public var handlesSignals = true
    /// The process is the supervisor's own (`supervisor start`): the signals it handles are blocked
    /// in every thread from the start and stay its own to the end. An embedded host's (false) are
    /// only caught while it runs, and given back to the program when `run` returns.
    public var ownsProcess = true
    /// Whether the control socket is served (`supervisor status` and the other client commands
    /// reach an embedded host through it too).
    public var servesControlSocket = true
    /// Also report the metrics through this swift-metrics factory (an embedded host: the program's
    /// backend, `MetricsSystem.factory`), besides the supervisor's own Prometheus registry.
    public var metricsFactory: (any MetricsFactory)?

    /// Whether `identifier` runs in debug mode.
    public func isDebugged(_ identifier: String) -> Bool { !debugPlugins.isEmpty && debugPlugins.contains(identifier) }

    /// A day: the longest timeout a request may ask for, and what stands for "no timeout" in debug
    /// mode.
    public static let longestTimeoutMs = CallTimeouts.longestMs

    /// The default home (`SupervisorLocation.defaultHome`).
    public static func defaultHome() -> String { SupervisorLocation.defaultHome(environment: ProcessEnvironment.all) }

    /// The control socket a CLI command talks to: `--socket`, else `$SUPERVISOR_SOCKET`, else the home's.
    public static func socketPath(option: String?, home: String?) -> String {
        SupervisorLocation.socketPath(socket: option, home: home, environment: ProcessEnvironment.all)
    }

    /// Runs the binaries in `folder` (`plugin-worker`, `plugin-forkserver`, `libPluginWorkerCore.so`,
    /// `supervisor-installer`) instead of those beside this executable.
    public mutating func useBinaries(in folder: String) {
        workerExecutable = folder + "/plugin-worker"
        installerExecutable = folder + "/supervisor-installer"
        forkServerExecutable = folder + "/plugin-forkserver"
        workerLibrary = folder + "/libPluginWorkerCore.so"
    }

    /// The value of `workerExecutable` and `forkServerExecutable` when the running program is its
    /// own workers' and fork server's binary (a host program with no `plugin-worker` beside it:
    /// docs/host.md, "Binaries"); Sources/CProcessRoles diverts it to its role before `main`.
    public static let programExecutable = "/proc/self/exe"
    /// The value of `workerLibrary` then: the worker's code is in the program already
    /// (`SP_FORKSERVER_PROGRAM`, Sources/CForkServer/include/fork_server.h).
    public static let programLibrary = "@program"
    /// What tells the program, re-executed, to run as a worker (removed before the worker's code runs).
    public static let workerRoleVariable = "SP_PROCESS_ROLE=worker"

    /// Runs the program itself as the workers' binary (exec'd with `workerRoleVariable`) and as the
    /// fork server (with `programLibrary`), for a program that has the worker's code linked in.
    /// Installs still need `supervisor-installer`, looked for beside the program.
    public mutating func useProgramAsWorkerBinary() {
        workerExecutable = Self.programExecutable
        forkServerExecutable = Self.programExecutable
        workerLibrary = Self.programLibrary
    }

    /// Whether the workers are the running program itself (`useProgramAsWorkerBinary`).
    public var workersRunProgram: Bool { workerLibrary == Self.programLibrary }

    public init(home: String? = nil, pluginDirectories: [String] = [], socketPath: String? = nil, workerExecutable: String? = nil) {
        let home = FileSystem.absolute(home ?? Self.defaultHome())
        self.home = home
        self.extraPluginDirectories = pluginDirectories.map(FileSystem.absolute)
        self.socketPath = Self.socketPath(option: socketPath, home: home)
        self.workerExecutable = workerExecutable ?? (FileSystem.executableDirectory() + "/plugin-worker")
        self.installerExecutable = FileSystem.executableDirectory() + "/supervisor-installer"
        self.forkServerExecutable = FileSystem.executableDirectory() + "/plugin-forkserver"
        self.workerLibrary = FileSystem.executableDirectory() + "/libPluginWorkerCore.so"
    }
}

extension SupervisorConfig {
    /// How `manifest`'s plugin starts: its own `activation`, else this configuration's.
    func activation(of manifest: Manifest) -> Manifest.Activation { manifest.activation ?? activation }

    /// How long `manifest`'s plugin may go without traffic before it is stopped: its own, else this
    /// configuration's; nil: never.
    func idleStopMs(of manifest: Manifest) -> Int? { manifest.idleStopMs ?? idleStopMs }

    /// The phase a plugin found or installed begins in: `waiting` to start, or `inactive` (`onCall`).
    func initialPhase(of manifest: Manifest) -> PluginPhase { activation(of: manifest) == .onCall ? .inactive : .waiting }
}
