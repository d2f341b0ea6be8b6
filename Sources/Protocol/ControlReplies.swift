import PluginProtocol

/// The answers of the control socket's requests (SPEC §6), one type each, shared by the
/// supervisor that encodes them and the clients that decode them. `status` answers `[PluginStatus]`;
/// `call` and `open` answer the plugin's own result; `metrics` the exposition as a JSON string.

/// `send`: which plugins handled the event, and why the others did not.
public struct SendOutcome: Codable, Sendable, Equatable {
    public var event: String
    public var delivered: [String]
    public var failed: [String: String]

    public init(event: String, delivered: [String], failed: [String: String]) {
        self.event = event
        self.delivered = delivered
        self.failed = failed
    }
}

/// `reload` (and SIGHUP): what a rescan found, and what runs once it has settled.
public struct ReloadSummary: Codable, Sendable, Equatable {
    public var new = 0
    public var changed = 0
    public var removed = 0
    public var running = 0
    public var failed = 0

    public init() {}
}

/// `update`: the plugins updated and the ones that could not be, with why.
public struct UpdateOutcome: Codable, Sendable, Equatable {
    public var updated: [String]
    public var failed: [String: String]

    public init(updated: [String], failed: [String: String]) {
        self.updated = updated
        self.failed = failed
    }
}

/// `update --check`: what the catalog offers above what is installed.
public struct UpdateCheck: Codable, Sendable, Equatable {
    public struct Available: Codable, Sendable, Equatable {
        public var identifier: String
        public var installed: String
        public var available: String

        public init(identifier: String, installed: String, available: String) {
            self.identifier = identifier
            self.installed = installed
            self.available = available
        }
    }

    public var catalog: String
    public var updates: [Available]

    public init(catalog: String, updates: [Available]) {
        self.catalog = catalog
        self.updates = updates
    }
}

/// The `params` of `install` and `update`.
public struct InstallOptions: Codable, Sendable, Equatable {
    /// Install a version lower than the one installed.
    public var force: Bool
    /// Install an archive with no signature from a trusted key.
    public var allowUnsigned: Bool
    /// `update --check`: only say what the catalog offers.
    public var check: Bool

    public init(force: Bool = false, allowUnsigned: Bool = false, check: Bool = false) {
        self.force = force
        self.allowUnsigned = allowUnsigned
        self.check = check
    }

    private enum CodingKeys: String, CodingKey { case force, allowUnsigned, check }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        force = try c.decodeIfPresent(Bool.self, forKey: .force) ?? false
        allowUnsigned = try c.decodeIfPresent(Bool.self, forKey: .allowUnsigned) ?? false
        check = try c.decodeIfPresent(Bool.self, forKey: .check) ?? false
    }
}

/// A `progress` frame a long request (install, update) sends before its reply.
public struct ProgressReport: Codable, Sendable, Equatable {
    public var stage: String
    public var done: Int64
    public var total: Int64
    public var message: String?

    public init(stage: String, done: Int64, total: Int64, message: String? = nil) {
        self.stage = stage
        self.done = done
        self.total = total
        self.message = message
    }
}
