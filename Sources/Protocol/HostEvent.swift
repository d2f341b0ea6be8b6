import PluginProtocol

/// What happened to a plugin, as a host program hears it (SPEC §12): `PluginHost.events()`,
/// `SupervisorClient`'s events and `supervisor events --json`, one object each. Members with no
/// value are left out.
public struct HostEvent: Codable, Sendable, Equatable {
    public enum Kind: String, Codable, Sendable, CaseIterable {
        /// A worker of the plugin serves its calls (`version`, `pid`).
        case started
        /// The worker that served it ended (`pid`, `lastExit` as `status` shows it; `replayed` and
        /// `retried`: the calls it held that go to the next worker, SPEC §15).
        case exited
        /// It is restarted by its restart policy (`attempt`: its restarts so far; `delay`, SPEC §12's
        /// name, in seconds, and `delayMs`, the same in milliseconds).
        case restarting
        /// It stays down (`lastError`) until restarted by hand.
        case failed
        /// An update switched it from one version to another (`from`, `to`, `pid`).
        case updated
        /// It was installed (`version`).
        case installed
        /// An `inactive` plugin was started because something needed it (`trigger`: `call`, `open`,
        /// `dependent <id>`, ...; SPEC §16).
        case activated
        /// It was stopped after `idleMs` without traffic and is `inactive` until it is needed again;
        /// without `idleMs`, a reload found a failed or stopped on-demand plugin's bundle fixed.
        case deactivated
        /// It was uninstalled (`version`: the one removed).
        case uninstalled
        /// This reader did not keep up and missed `count` events (the supervisor never waits for
        /// a reader).
        case dropped
    }

    public var event: Kind
    /// The plugin (absent for `dropped`).
    public var plugin: String?
    /// When it happened: RFC 3339, UTC.
    public var time: String
    public var version: String?
    public var pid: Int32?
    public var lastExit: ExitStatus?
    public var attempt: Int?
    public var delayMs: Int?
    /// `restarting`: `delayMs` in seconds.
    public var delay: Double?
    public var lastError: String?
    public var from: String?
    public var to: String?
    public var count: Int?
    /// `exited`: calls the worker held that its plugin had not started, sent to the next worker.
    public var replayed: Int?
    /// `exited`: calls of idempotent methods its plugin had started, sent again to the next worker.
    public var retried: Int?
    /// `activated`: what needed it.
    public var trigger: String?
    /// `deactivated`: how long it had no traffic.
    public var idleMs: Int?

    public init(event: Kind, plugin: String?, time: String, version: String? = nil, pid: Int32? = nil, lastExit: ExitStatus? = nil,
                attempt: Int? = nil, delayMs: Int? = nil, lastError: String? = nil, from: String? = nil, to: String? = nil, count: Int? = nil,
                replayed: Int? = nil, retried: Int? = nil, trigger: String? = nil, idleMs: Int? = nil) {
        self.event = event
        self.plugin = plugin
        self.time = time
        self.version = version
        self.pid = pid
        self.lastExit = lastExit
        self.attempt = attempt
        self.delayMs = delayMs
        self.delay = delayMs.map { Double($0) / 1000 }
        self.lastError = lastError
        self.from = from
        self.to = to
        self.count = count
        self.replayed = replayed
        self.retried = retried
        self.trigger = trigger
        self.idleMs = idleMs
    }
}

/// The events a host may send to its plugins (SPEC §12 `send`).
public enum LifecycleEvent: String, Codable, Sendable, CaseIterable {
    case memoryWarning, background, foreground
}
