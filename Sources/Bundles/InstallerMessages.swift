#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import PluginProtocol

/// What the supervisor (or the CLI, offline) asks `supervisor-installer` to do. Downloading,
/// unpacking and signature checks run in that separate process, so the code that parses untrusted
/// archives and HTTP answers (libcurl, libarchive) never runs inside the supervisor, and the
/// supervisor and CLI start without loading those libraries.
public struct InstallRequest: Codable, Sendable {
    public enum Operation: String, Codable, Sendable {
        /// Download (or read) an archive, check it, unpack it, preflight it: a `BundleStore.Staged`.
        case stage
        /// Fetch the catalog with a conditional GET into `<home>/cache`: a `CatalogLoaded`.
        case catalog
        /// Download one file with a conditional GET: a `Fetched`.
        case fetch
    }

    public var operation: Operation
    public var home: String
    public var lowSpeedSeconds: Int
    public var maxBytes: Int
    // stage
    public var source: String?
    public var entry: CatalogEntry?
    public var force: Bool?
    public var allowUnsigned: Bool?
    public var trustedKeys: [String]?
    public var sandbox: Bool?
    public var workerExecutable: String?
    public var runtimePaths: [String]?
    public var otherBundles: [String: String]?
    // catalog and fetch
    public var url: String?
    public var destination: String?
    public var etag: String?
    public var lastModified: String?

    public init(operation: Operation, home: String, lowSpeedSeconds: Int, maxBytes: Int) {
        self.operation = operation
        self.home = home
        self.lowSpeedSeconds = lowSpeedSeconds
        self.maxBytes = maxBytes
    }

    /// The environment variable the request travels in.
    public static let environmentVariable = "SP_INSTALL_REQUEST"
}

/// The catalog as the installer fetched it.
public struct CatalogLoaded: Codable, Sendable {
    public var entries: [CatalogEntry]
    /// `downloaded`, `notModified` (a 304), or `cached (why)` when the server failed.
    public var source: String
    public init(entries: [CatalogEntry], source: String) {
        self.entries = entries
        self.source = source
    }
}

/// One conditional download's outcome.
public struct Fetched: Codable, Sendable {
    public var notModified: Bool
    public var etag: String?
    public var lastModified: String?
    public init(notModified: Bool, etag: String?, lastModified: String?) {
        self.notModified = notModified
        self.etag = etag
        self.lastModified = lastModified
    }
}

/// One line of the installer's output: progress on the way, then exactly one result or error.
public struct InstallerLine: Codable, Sendable {
    public struct Progress: Codable, Sendable {
        public var stage: String
        public var done: Int64
        public var total: Int64
        public init(stage: String, done: Int64, total: Int64) {
            self.stage = stage
            self.done = done
            self.total = total
        }
    }

    public var progress: Progress?
    /// A preflight worker the installer spawned (refused on the control socket like any worker).
    public var preflightPID: Int32?
    public var staged: BundleStore.Staged?
    public var catalog: CatalogLoaded?
    public var fetched: Fetched?
    public var error: ErrorBody?

    public init() {}
}

extension InstallerLine {
    /// A result or an error (the last line), not progress.
    public var isAnswer: Bool { staged != nil || catalog != nil || fetched != nil || error != nil }
}
