import PluginProtocol

/// One plugin as `supervisor status --json` shows it (SPEC §6).
public struct PluginStatus: Codable, Sendable, Equatable {
    public var identifier: String
    public var version: String
    /// `starting|running|restarting|failed|stopped|inactive` (`inactive`: no worker until it is needed, SPEC §16)
    public var state: String
    public var pid: Int32?
    public var restarts: Int
    public var lastExit: ExitStatus?
    public var dependencies: [String]
    /// The library chosen (a variant's, or the manifest's `library`).
    public var variant: String?
    /// The sandbox layers in force in the running worker.
    public var sandbox: [String]
    /// Layers this host could not provide.
    public var sandboxMissing: [String]?
    /// Why the plugin is not running, when it is not.
    public var error: String?
    /// Microseconds the running worker spent starting: `spawnUs` (spawn → worker's main),
    /// `sandboxUs`, `loadUs` (dlopen + create; `dlopenUs` the first part), `helloUs` (spawn → hello),
    /// `startupUs` (spawn → running); a standby's also `standbyUs` and `loadOrderUs` (spawn → `load` sent).
    public var timings: [String: Int]?
    /// Calls the sandbox refused over the plugin's life, by syscall (SPEC §5): denials that returned
    /// EPERM and violations that ended a worker. Empty when none (or none could be counted).
    public var sandboxDenials: [String: Int]?
    /// SPEC §6: why it is failed, or why it last failed (an update rolled back after a crash).
    public var lastError: String?
    /// An update's new version starting beside the worker that serves (SPEC §8), until it takes over.
    public var updating: Updating?
    /// Run for a debugger (`start --debug`): no watchdog, no timeouts, a worker one can attach to.
    public var debug: Bool?
    /// How the running worker was started: `fork-server` (forked by the fork server) or `exec`.
    public var workerStart: String?
    /// Why it was exec'd although the configuration asks for the fork server.
    public var workerStartProblem: String?
    /// The dependencies its worker has a direct link to (docs/protocol.md "Peer links"): its calls
    /// to them skip the supervisor.
    public var links: [String]?
    /// The version of the supervisor that serves it (after an upgrade in place, the new one's).
    public var supervisorVersion: String?
    /// The worker waiting, sandboxed and before the plugin's library loads, to take its next
    /// restart: kept beside the running one (`standbyWorkers: "always"`), or spawned on a crash's
    /// notice (docs/architecture.md, "Restarts: the standby worker").
    public var standbyPid: Int32?

    /// SPEC §6 names `pid`, `lastExit`, `variant` and `lastError` among what `status --json` shows
    /// for each plugin: they are written as `null` when there is none; other keys without a value
    /// are left out. (The control socket's answer is written by `PluginStatus.json`, to the byte
    /// what this writes: `PluginStatusJSONTests`.)
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(identifier, forKey: .identifier)
        try c.encode(version, forKey: .version)
        try c.encode(state, forKey: .state)
        try c.encode(pid, forKey: .pid)
        try c.encode(restarts, forKey: .restarts)
        try c.encode(lastExit, forKey: .lastExit)
        try c.encode(dependencies, forKey: .dependencies)
        try c.encode(variant, forKey: .variant)
        try c.encode(sandbox, forKey: .sandbox)
        try c.encodeIfPresent(sandboxMissing, forKey: .sandboxMissing)
        try c.encodeIfPresent(error, forKey: .error)
        try c.encodeIfPresent(timings, forKey: .timings)
        try c.encodeIfPresent(sandboxDenials, forKey: .sandboxDenials)
        try c.encode(lastError, forKey: .lastError)
        try c.encodeIfPresent(updating, forKey: .updating)
        try c.encodeIfPresent(debug, forKey: .debug)
        try c.encodeIfPresent(workerStart, forKey: .workerStart)
        try c.encodeIfPresent(workerStartProblem, forKey: .workerStartProblem)
        try c.encodeIfPresent(links, forKey: .links)
        try c.encodeIfPresent(supervisorVersion, forKey: .supervisorVersion)
        try c.encodeIfPresent(standbyPid, forKey: .standbyPid)
    }

    /// The new version of an update and its worker.
    public struct Updating: Codable, Sendable, Equatable {
        public var version: String
        public var pid: Int32

        public init(version: String, pid: Int32) {
            self.version = version
            self.pid = pid
        }
    }

    public init(identifier: String, version: String, state: String, pid: Int32?, restarts: Int, lastExit: ExitStatus?,
                dependencies: [String], variant: String?, sandbox: [String], sandboxMissing: [String]?, error: String?,
                timings: [String: Int]? = nil, sandboxDenials: [String: Int]? = nil, lastError: String? = nil, updating: Updating? = nil, debug: Bool? = nil,
                workerStart: String? = nil, workerStartProblem: String? = nil, links: [String]? = nil) {
        self.identifier = identifier
        self.version = version
        self.state = state
        self.pid = pid
        self.restarts = restarts
        self.lastExit = lastExit
        self.dependencies = dependencies
        self.variant = variant
        self.sandbox = sandbox
        self.sandboxMissing = sandboxMissing
        self.error = error
        self.timings = timings
        self.sandboxDenials = sandboxDenials
        self.lastError = lastError
        self.updating = updating
        self.debug = debug
        self.workerStart = workerStart
        self.workerStartProblem = workerStartProblem
        self.links = links
    }
}

